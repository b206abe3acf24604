/*
 * gofixtures.mjs - Go sources that more than one test or benchmark sends: imported by
 * tests/e2e/testmode.test.mjs and bench/testbench.mjs. No imports of its own, so a benchmark
 * can load it without the test runner.
 */

/* calcLib - package calc (Add, Sign), the library under test in test mode; note: a comment
 * line put after the package clause (a benchmark's round number keeps caches from matching) */
export const calcLib = (note = '') => `package calc
${note ? `\n// ${note}\n` : ''}
// Add adds.
func Add(a, b int) int { return a + b }

// Sign is -1, 0 or 1.
func Sign(x int) int {
	if x < 0 {
		return -1
	}
	if x > 0 {
		return 1
	}
	return 0
}
`;
