import { connect, callTool, sc, text } from './lib.mjs';
const s = await connect();
const snip = (body, imports='') => `package snippet\nimport ("context"; ${imports})\nfunc run(ctx context.Context) (any, error) {\n${body}\n}\n`;
const cases = {
  ok: snip('type P struct{ Name string `json:"name"`; N int `json:"n"` }\nreturn P{"gopher", 42}, nil'),
  err: snip('return nil, errors.New("boom")', '"errors"'),
  build: snip('x := 1\nreturn y, nil'),
};
for (const [k, code] of Object.entries(cases)) {
  const t0 = Date.now();
  try {
    const r = await callTool(s.client, 'execute_go_code', {code});
    console.log(k, Date.now()-t0, 'ms', r.isError, JSON.stringify(sc(r)).slice(0, 1500));
  } catch (e) { console.log(k, 'ERR', e.message); }
}
await s.close();
process.exit(0);
