// @i-know-the-amp-plugin-api-is-wip-and-very-experimental-right-now
// snapshotd for Amp: a checkpoint after every tool call.
// Copy to <project>/.amp/plugins/ (or ~/.config/amp/plugins/) and run Amp with PLUGINS=all.
//
// On each `tool.result` event it runs `snapshot-hook` (or $SNAPSHOT_HOOK) as a child process,
// never through a shell, and writes one JSON document on its stdin:
//   {"snapshotd_plugin": "amp", "cwd": <Amp's working directory>,
//    "event": {"thread": {"id"}, "toolUseID", "tool", "input", "status", "error"}}
// The handler waits for the hook, which exits within its own budget (SNAPSHOTD_HOOK_TIMEOUT_MS).
import type { PluginAPI } from '@ampcode/plugin'
import { spawn } from 'node:child_process'

export default function (amp: PluginAPI) {
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
