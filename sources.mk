# sources.mk - what every build of the tree compiles and links: included by the root Makefile
# and by tests/fuzz/Makefile (both run from the project root), so a new folder or library is
# named once.
#
#   lib/     shared helpers (clock, secrets, ...) any process may link
#   ipc/     the master<->worker contract and the code every process shares for it
#   policy/  confinement (jail, seccomp, landlock, caps) and the named limits
#   agent/ worker/ master/   the three roles

KG_SRC_DIRS := lib ipc policy agent worker master
KG_SRC      := $(sort $(wildcard $(KG_SRC_DIRS:%=%/*.c)))
KG_ASM      := $(sort $(wildcard runtime/*.S))
KG_LIBS     := -lnng -lmsgpackc -lcurl -ljansson -lseccomp -lmicrohttpd -lgnutls -lcrypto -lyaml -lpthread
