/*
 * stdplan.h - the runtime's standard-library plan: what `go build` links for every standard
 * package, written once per runtime by runtime/stdplan.sh (`make runtime`), so that the direct
 * build path (agent/fastbuild.c) has a plan for a standard-library snippet in a sandbox that has
 * never run go build (a new sandbox's first call, every `kode-gopher exec`).
 *
 * The file, <runtime dir>/stdplan, one record a line, fields split by one space (the last field
 * of flags and modinfo is the rest of the line); written only by runtime/stdplan.sh, read only
 * here:
 *
 *   kode-gopher std plan v1
 *   stamp <the runtime's stamp file>       the runtime it was made for
 *   script <sha256 of stdplan.sh>          (for the script's own up-to-date check)
 *   lock <sha256 of lock/go.mod>           the go.mod it was made with
 *   version <go1.26.8>  goroot <dir>  tooldir <dir>  gocache <dir>
 *   flags <go build's flags, as gobuild_build_flags joined by spaces>
 *   env <NAME=value>                       one per line: the go command's environment
 *   tool <path> <size> <mtime seconds>     the go binary, compile, link, VERSION
 *   modinfo <...>                          go build's line for a main package of the lock's
 *                                          module importing only the standard library
 *   pkg <import path> <cache file|-> <size|-> <imports,comma-separated|->   every std package
 *
 * Everything but the script line must match what this sandbox sees, or the plan is refused.
 */
#ifndef KG_STDPLAN_H
#define KG_STDPLAN_H

#include <stddef.h>

#include "agent/gobuild.h"
#include "policy/limits.h"

#define STDPLAN_FILE      "stdplan"

/*
 * stdplan_link_cfg - the importcfg.link go build would write for a main package whose imports
 * are imports[0..n), from runtime_dir/stdplan: a first line for the main package
 * ("packagefile app=-"), a line for every package linked (the imports' closure and runtime's),
 * then go build's modinfo line. Returns 1 with *text (malloc'd, *len bytes); 0 when the plan
 * does not apply, with why (no plan, another runtime, lockfile, toolchain, build cache, flags or
 * environment; a go.mod that is not the lockfile; an import that is not a standard package or
 * one a main package may not import; a package file missing or of another size); or -ENOMEM.
 */
int stdplan_link_cfg(const char *runtime_dir, const struct gobuild_env *e,
		     const struct gobuild_tools *t, const struct gobuild_modfiles *m,
		     char *const *imports, size_t n, char **text, size_t *len, char *why,
		     size_t whylen);

#endif
