// A small Node.js service. The agent (agent.js) is loaded before it with
// NODE_OPTIONS=--require, as APM agents are.
const http = require("http");
const stage = process.env.PODVISOR_INSTR_STAGE || "none";
const server = http.createServer((req, res) => res.end(`ok (stage ${stage})\n`));
server.listen(0, "127.0.0.1", () => {
  console.log(`app: listening on ${server.address().port} (stage ${stage})`);
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
