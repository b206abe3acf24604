// Command oidc-provider is the tests' stand-in for Google's sign-in: zitadel's OpenID Connect
// provider (github.com/zitadel/oidc/v3, its op package with the in-memory storage of its example
// server), configured the way kode-gopher's tests need it and nothing more. The protocol is all
// zitadel's; this file only wires it up:
//
//   - it listens on the loopback address given by -addr (port 0 picks one) and prints
//     "issuer http://127.0.0.1:PORT" on stdout once it serves, so a test can read the port;
//   - one confidential web client (-client-id, -client-secret) whose redirect URIs are the
//     comma-separated globs -redirect-glob, since the test's kode-gopher picks its port only
//     when it starts;
//   - users from -users (the example storage's JSON: {"id": {"ID", "Username", "Password",
//     "Email", "EmailVerified", ...}}); the login form is the example's /login/username;
//   - like Google, the ID token carries email and email_verified even though an access token is
//     issued too, and users whose email domain is in -workspace-domains get Google's "hd" claim
//     (a Workspace domain), everyone else none (a consumer account);
//   - like Google, the client may ask for the Cloud scopes (https://www.googleapis.com/auth/...)
//     and, with offline_access, gets a refresh token for them that its token endpoint refreshes
//     (zitadel rotates it on every use; its access tokens live 5 minutes); /userinfo with such an
//     access token names its user;
//   - POST /test/revoke?user=EMAIL ends every grant of that user to the client (zitadel's
//     TerminateSession), as a person removing the app's access in their Google account would:
//     the next refresh is refused with invalid_grant.
//
// Built by tests/oidc/build.sh into /var/cache/kode-gopher/oidc-bin; started by the e2e tests.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// googleLikeClient asserts userinfo claims in the ID token (Google does) and accepts the
// redirect glob.
type googleLikeClient struct {
	op.Client
	globs []string
}

func (c googleLikeClient) IDTokenUserinfoClaimsAssertion() bool { return true }
func (c googleLikeClient) IsScopeAllowed(scope string) bool {
	return strings.HasPrefix(scope, "https://www.googleapis.com/auth/")
}
func (c googleLikeClient) RedirectURIGlobs() []string           { return c.globs }
func (c googleLikeClient) PostLogoutRedirectURIGlobs() []string { return nil }

// store is the example's in-memory storage with Google's hd claim and the client above.
type store struct {
	*storage.Storage
	users     storage.UserStore
	globs     []string
	workspace map[string]bool
}

func (s *store) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	return googleLikeClient{Client: c, globs: s.globs}, nil
}

func (s *store) SetUserinfoFromRequest(ctx context.Context, info *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, info, req, scopes); err != nil {
		return err
	}
	if u := s.users.GetUserByID(req.GetSubject()); u != nil {
		if at := strings.LastIndexByte(u.Email, '@'); at >= 0 && s.workspace[u.Email[at+1:]] {
			info.AppendClaims("hd", u.Email[at+1:])
		}
	}
	return nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "loopback address to listen on")
	usersFile := flag.String("users", "", "users, as the example storage's JSON")
	clientID := flag.String("client-id", "kode-gopher-test", "the one client's id")
	secretFile := flag.String("client-secret-file", "", "file holding the client's secret")
	glob := flag.String("redirect-glob", "http://127.0.0.1:*/oauth/callback", "the client's redirect URIs (comma-separated globs)")
	workspace := flag.String("workspace-domains", "", "comma-separated email domains that get an hd claim")
	flag.Parse()

	host, _, err := net.SplitHostPort(*addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		fmt.Fprintf(os.Stderr, "oidc-provider: -addr must be a loopback IP:PORT, not %q\n", *addr)
		os.Exit(2)
	}
	secret, err := os.ReadFile(*secretFile)
	if err != nil || *usersFile == "" {
		fmt.Fprintln(os.Stderr, "oidc-provider: -users FILE and -client-secret-file FILE are required")
		os.Exit(2)
	}
	users, err := storage.StoreFromFile(*usersFile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "oidc-provider: %s: %v\n", *usersFile, err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "oidc-provider: %v\n", err)
		os.Exit(1)
	}
	issuer := "http://" + ln.Addr().String()

	clients := map[string]*storage.Client{
		*clientID: storage.WebClient(*clientID, strings.TrimSpace(string(secret)), "http://127.0.0.1/unused"),
	}
	ws := map[string]bool{}
	for _, d := range strings.Split(*workspace, ",") {
		if d != "" {
			ws[d] = true
		}
	}
	s := &store{Storage: storage.NewStorageWithClients(users, clients), users: users,
		globs: strings.Split(*glob, ","), workspace: ws}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	router := exampleop.SetupServer(issuer, s, logger, false)
	router.Post("/test/revoke", func(w http.ResponseWriter, r *http.Request) {
		u := users.GetUserByUsername(r.URL.Query().Get("user")) // the tests' usernames are emails
		if u == nil {
			http.Error(w, "no such user", http.StatusNotFound)
			return
		}
		if err := s.TerminateSession(r.Context(), u.ID, *clientID); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})

	fmt.Printf("issuer %s\n", issuer)
	if err := http.Serve(ln, router); err != nil {
		fmt.Fprintf(os.Stderr, "oidc-provider: %v\n", err)
		os.Exit(1)
	}
}
