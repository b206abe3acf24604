/*
 * exec.c - `kode-gopher exec` and `kode-gopher sandboxes` (filled in by the local-sandbox work).
 */
#include <stdio.h>

#include "master/master.h"

int exec_main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "kode-gopher exec: not yet available\n");
	return 2;
}

int sandboxes_main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "kode-gopher sandboxes: not yet available\n");
	return 2;
}
