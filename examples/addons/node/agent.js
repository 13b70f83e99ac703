// A stand-in for a Node.js APM agent loaded with NODE_OPTIONS=--require. With
// AGENT_MODE=crash it fails the way a broken agent does: it throws while patching modules,
// before the app's own code runs.
const debug = process.env.AGENT_LOG === "debug";
if (debug) console.error(`agent: loaded into pid ${process.pid}`);
if (process.env.AGENT_MODE === "crash") {
  if (debug) console.error("agent: patching http failed");
  throw new Error("agent: cannot instrument module 'http'");
}
