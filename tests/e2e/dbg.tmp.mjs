import { connect, callTool, sc, text } from './lib.mjs';
const s = await connect();
const code = `package snippet
import ("bufio";"context";"fmt";"os";"strings")
func run(ctx context.Context) (any, error) {
	line := strings.Repeat("z", 1023) + "\\n"
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprint(w, "HEAD-MARK\\n")
	for i := 0; i < 10*1024; i++ { w.WriteString(line) }
	fmt.Fprint(w, "TAIL-MARK\\n")
	w.Flush()
	return "done", nil
}`;
try {
  const r = await callTool(s.client, 'execute_go_code', {code});
  console.log(JSON.stringify(sc(r)).length);
} catch (e) { console.log('ERR', e.message); }
console.log(s.stderr.split('\n').filter(l => !/debug/.test(l)).join('\n').slice(-5000));
await s.close();
process.exit(0);
