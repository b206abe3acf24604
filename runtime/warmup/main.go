// Warm-up program for the kode-gopher runtime.
//
// runtime/prepare.sh builds this program (it is never run) with exactly the
// environment and flags that the agent uses for user builds, so that every
// package imported here lands in the Go build cache. A user's snippet that
// imports any of them then compiles only its own package and links.
//
// It also anchors the lockfile: `go mod tidy` in runtime/ keeps a module in
// go.mod only while some package of it is imported here. To add a module,
// import its commonly used packages below (see runtime/README.md).
//
// Blank imports are enough: the compiler builds a whole package whatever a
// program uses of it, and they keep this file from breaking when an API is
// renamed in a later version.
package main

import (
	// Standard library that the generated main and typical snippets use.
	// prepare.sh compiles all of std as well; listing these keeps them warm
	// even if that step is ever dropped.
	_ "bufio"
	_ "bytes"
	_ "compress/gzip"
	_ "context"
	_ "crypto/rand"
	_ "crypto/sha256"
	_ "encoding/base64"
	_ "encoding/csv"
	_ "encoding/hex"
	_ "encoding/json"
	_ "errors"
	_ "flag"
	_ "fmt"
	_ "io"
	_ "log"
	_ "log/slog"
	_ "maps"
	_ "math"
	_ "math/rand/v2"
	_ "net/http"
	_ "net/url"
	_ "os"
	_ "os/signal"
	_ "path/filepath"
	_ "regexp"
	_ "runtime/debug"
	_ "slices"
	_ "sort"
	_ "strconv"
	_ "strings"
	_ "sync"
	_ "sync/atomic"
	_ "syscall"
	_ "text/tabwriter"
	_ "text/template"
	_ "time"
	_ "unicode/utf8"

	// Cloud Storage.
	_ "cloud.google.com/go/storage"

	// BigQuery.
	_ "cloud.google.com/go/bigquery"

	// Pub/Sub: the v2 client (apiv1 holds its admin clients), and the
	// deprecated v1 client that much existing code still imports.
	_ "cloud.google.com/go/pubsub"
	_ "cloud.google.com/go/pubsub/v2"
	_ "cloud.google.com/go/pubsub/v2/apiv1"
	_ "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	// Firestore, data and admin.
	_ "cloud.google.com/go/firestore"
	_ "cloud.google.com/go/firestore/apiv1/admin"
	_ "cloud.google.com/go/firestore/apiv1/admin/adminpb"

	// GKE.
	_ "cloud.google.com/go/container/apiv1"
	_ "cloud.google.com/go/container/apiv1/containerpb"

	// Compute Engine (the gRPC-style client over REST).
	_ "cloud.google.com/go/compute/apiv1"
	_ "cloud.google.com/go/compute/apiv1/computepb"
	_ "cloud.google.com/go/compute/metadata"

	// Cloud Logging: writing, reading and admin.
	_ "cloud.google.com/go/logging"
	_ "cloud.google.com/go/logging/apiv2"
	_ "cloud.google.com/go/logging/apiv2/loggingpb"
	_ "cloud.google.com/go/logging/logadmin"

	// Secret Manager.
	_ "cloud.google.com/go/secretmanager/apiv1"
	_ "cloud.google.com/go/secretmanager/apiv1/secretmanagerpb"

	// Resource Manager (projects, folders, organizations, tags).
	_ "cloud.google.com/go/resourcemanager/apiv3"
	_ "cloud.google.com/go/resourcemanager/apiv3/resourcemanagerpb"

	// IAM: policy handles, service accounts and roles, credentials.
	_ "cloud.google.com/go/iam"
	_ "cloud.google.com/go/iam/admin/apiv1"
	_ "cloud.google.com/go/iam/admin/apiv1/adminpb"
	_ "cloud.google.com/go/iam/apiv1/iampb"
	_ "cloud.google.com/go/iam/credentials/apiv1"
	_ "cloud.google.com/go/iam/credentials/apiv1/credentialspb"

	// Long-running operations returned by the apiv* clients.
	_ "cloud.google.com/go/longrunning"
	_ "cloud.google.com/go/longrunning/autogen/longrunningpb"

	// Authentication.
	_ "cloud.google.com/go/auth"
	_ "cloud.google.com/go/auth/credentials"
	_ "cloud.google.com/go/auth/credentials/idtoken"
	_ "cloud.google.com/go/auth/credentials/impersonate"
	_ "golang.org/x/oauth2"
	_ "golang.org/x/oauth2/google"

	// google.golang.org/api: options, helpers and a few discovery clients
	// that models reach for when no idiomatic client exists.
	_ "google.golang.org/api/cloudresourcemanager/v1"
	_ "google.golang.org/api/cloudresourcemanager/v3"
	_ "google.golang.org/api/googleapi"
	_ "google.golang.org/api/iam/v1"
	_ "google.golang.org/api/iamcredentials/v1"
	_ "google.golang.org/api/idtoken"
	_ "google.golang.org/api/impersonate"
	_ "google.golang.org/api/iterator"
	_ "google.golang.org/api/option"
	_ "google.golang.org/api/serviceusage/v1"

	// gRPC, protobuf and gax, which client code handles directly
	// (status codes, field masks, timestamps, retries, API errors).
	_ "github.com/googleapis/gax-go/v2"
	_ "github.com/googleapis/gax-go/v2/apierror"
	_ "google.golang.org/grpc"
	_ "google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/metadata"
	_ "google.golang.org/grpc/status"
	_ "google.golang.org/protobuf/encoding/protojson"
	_ "google.golang.org/protobuf/proto"
	_ "google.golang.org/protobuf/types/known/durationpb"
	_ "google.golang.org/protobuf/types/known/emptypb"
	_ "google.golang.org/protobuf/types/known/fieldmaskpb"
	_ "google.golang.org/protobuf/types/known/structpb"
	_ "google.golang.org/protobuf/types/known/timestamppb"

	// Concurrency helpers.
	_ "golang.org/x/sync/errgroup"
	_ "golang.org/x/sync/semaphore"
	_ "golang.org/x/sync/singleflight"
)

// main - does nothing: the program exists to be compiled, never to be run.
func main() {}
