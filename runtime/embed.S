/*
 * embed.S - puts runtime/main.go.tmpl, the generated main for snippets, into the binary.
 *
 * Read by agent/normalize.c, which adds it to a snippet as kode_gopher_main.go. The template
 * stays a real Go file in the tree (gofmt and the tests can see it) instead of a C string.
 *
 * .incbin looks for its path in the assembler's working directory and in the -I directories,
 * which the gcc and clang drivers pass on to the assembler; the Makefiles assemble with -I. from
 * the project root. Their pattern rule for .S files does not know about the template: after
 * editing it, remove build/runtime/embed.o (or add the dependency to the root Makefile).
 *
 *   embed_main_go_tmpl       the template's bytes, followed by a NUL so C may use it as a string
 *   embed_main_go_tmpl_size  its length in bytes (uint64_t), not counting the NUL
 */
	.section .rodata
	.balign 16
	.globl embed_main_go_tmpl
	.type embed_main_go_tmpl, @object
embed_main_go_tmpl:
	.incbin "runtime/main.go.tmpl"
.Lembed_main_go_tmpl_end:
	.byte 0
	.size embed_main_go_tmpl, . - embed_main_go_tmpl

	.balign 8
	.globl embed_main_go_tmpl_size
	.type embed_main_go_tmpl_size, @object
embed_main_go_tmpl_size:
	.quad .Lembed_main_go_tmpl_end - embed_main_go_tmpl
	.size embed_main_go_tmpl_size, 8

	/* no executable stack */
	.section .note.GNU-stack,"",@progbits
