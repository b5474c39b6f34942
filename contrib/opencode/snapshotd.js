// snapshotd for OpenCode: a checkpoint after every tool call, and the session's lifecycle.
// Copy to <project>/.opencode/plugin/ (or ~/.config/opencode/plugin/). OpenCode loads it at start.
//
// After each tool call (`tool.execute.after`) it runs `snapshot-hook` (or $SNAPSHOT_HOOK) as a
// child process, never through a shell, and writes one JSON document on its stdin:
//   {"snapshotd_plugin": "opencode", "event": "tool.execute.after",
//    "input": {"tool", "sessionID", "callID"}, "args": <the tool's arguments>,
//    "directory": <the plugin's directory>, "worktree": <the project's worktree>}
// The arguments come from `tool.execute.before` (the after hook's input may lack them). The tool
// call waits for the hook, which exits within its own budget (SNAPSHOTD_HOOK_TIMEOUT_MS), so each
// checkpoint holds its own call's changes. Nothing the hook does can fail the tool call.
//
// A session's lifecycle goes the same way, as {"snapshotd_plugin": "opencode", "event": <name>,
// "input": {"sessionID"}, "directory", "worktree"}: `session.created` (its attempt begins, owned
// by this OpenCode process, the hook's parent), `chat.message` (a user message: working),
// `session.idle` (waiting for the user) and `session.deleted` (ended). A subagent's session (one
// with a parent) is part of its parent's work and is not forwarded.
import { spawn } from "node:child_process";

const LIFECYCLE = ["session.created", "session.idle", "session.deleted"];

export const Snapshotd = async ({ directory, worktree }) => {
  const pending = new Map();
  const session = (event, sessionID) =>
    runHook({ snapshotd_plugin: "opencode", event, input: { sessionID }, directory, worktree });
  return {
    event: async ({ event }) => {
      if (!event || !LIFECYCLE.includes(event.type)) return;
      const props = event.properties ?? {};
      const info = props.info ?? {};
      if (info.parentID) return;
      const id = props.sessionID ?? info.id;
      if (id) await session(event.type, id);
    },
    "chat.message": async (input) => {
      if (input?.sessionID) await session("chat.message", input.sessionID);
    },
    "tool.execute.before": async (input, output) => {
      pending.set(input.callID, output?.args ?? null);
    },
    "tool.execute.after": async (input) => {
      const args = input.args ?? pending.get(input.callID) ?? null;
      pending.delete(input.callID);
      await runHook({
        snapshotd_plugin: "opencode",
        event: "tool.execute.after",
        input: { tool: input.tool, sessionID: input.sessionID, callID: input.callID },
        args,
        directory,
        worktree,
      });
    },
  };
};

export function runHook(payload) {
  return new Promise((resolve) => {
    let child;
    try {
      child = spawn(process.env.SNAPSHOT_HOOK || "snapshot-hook", [], {
        stdio: ["pipe", "ignore", "ignore"],
      });
    } catch {
      resolve(false);
      return;
    }
    child.on("error", () => resolve(false));
    child.on("close", (code) => resolve(code === 0));
    child.stdin.on("error", () => {});
    child.stdin.end(JSON.stringify(payload));
  });
}
