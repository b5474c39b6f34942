// @i-know-the-amp-plugin-api-is-wip-and-very-experimental-right-now
// snapshotd for Amp: a checkpoint after every tool call, and the thread's lifecycle.
// Copy to <project>/.amp/plugins/ (or ~/.config/amp/plugins/) and run Amp with PLUGINS=all.
//
// On each `tool.result` event it runs `snapshot-hook` (or $SNAPSHOT_HOOK) as a child process,
// never through a shell, and writes one JSON document on its stdin:
//   {"snapshotd_plugin": "amp", "cwd": <Amp's working directory>,
//    "event": {"thread": {"id"}, "toolUseID", "tool", "input", "status", "error"}}
// The handler waits for the hook, which exits within its own budget (SNAPSHOTD_HOOK_TIMEOUT_MS).
// The thread's `session.start` (its attempt begins, owned by the plugin's process, the hook's
// parent), `agent.start` (working) and `agent.end` (waiting for the user) go the same way, as
// {"snapshotd_plugin": "amp", "hook": <event name>, "cwd", "event": {"thread": {"id"}}}.
import type { PluginAPI } from '@ampcode/plugin'
import { spawn } from 'node:child_process'

export default function (amp: PluginAPI) {
	amp.on('session.start', async (event, ctx) => {
		await forward('session.start', event, ctx)
	})
	amp.on('agent.start', async (event, ctx) => {
		await forward('agent.start', event, ctx)
	})
	amp.on('agent.end', async (event, ctx) => {
		await forward('agent.end', event, ctx)
	})
	amp.on('tool.result', async (event) => {
		const e = event as Record<string, unknown>
		await runHook({
			snapshotd_plugin: 'amp',
			cwd: process.cwd(),
			event: {
				thread: e.thread,
				toolUseID: e.toolUseID,
				tool: e.tool,
				input: e.input,
				status: e.status,
				error: e.error,
			},
		})
	})
}

// The thread is the event's, else the handler context's (not every event names it).
function forward(hook, event, ctx) {
	const thread = (event as Record<string, unknown>)?.thread ?? (ctx as Record<string, unknown>)?.thread
	return runHook({ snapshotd_plugin: 'amp', hook, cwd: process.cwd(), event: { thread } })
}

export function runHook(payload: unknown): Promise<boolean> {
	return new Promise((resolve) => {
		let child
		try {
			child = spawn(process.env.SNAPSHOT_HOOK || 'snapshot-hook', [], {
				stdio: ['pipe', 'ignore', 'ignore'],
			})
		} catch {
			resolve(false)
			return
		}
		child.on('error', () => resolve(false))
		child.on('close', (code) => resolve(code === 0))
		child.stdin.on('error', () => {})
		child.stdin.end(JSON.stringify(payload))
	})
}
