// The built `playbook` command in a real process, as a user starts it: its exit code and output.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";

// The bundle `npm run build` makes, which package.json's bin and the image run.
export const CLI = join(import.meta.dirname, "../../dist/bin/playbook.js");

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `playbook <args>` with only PATH, HOME and `env` in its environment; `stdin` is its input. */
export function startCli(
  args: string[],
  options: { env?: NodeJS.ProcessEnv; onSpawn?: (child: ChildProcess) => void; stdin?: string } = {},
): Promise<CliResult> {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...options.env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  // No input is an empty one: stdin ends at once, as /dev/null would.
  child.stdin.end(options.stdin ?? "");
  options.onSpawn?.(child);
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => {
    stdout += c.toString();
  });
  child.stderr.on("data", (c: Buffer) => {
    stderr += c.toString();
  });
  return new Promise((resolve) => child.on("close", (code) => resolve({ code, stdout, stderr })));
}

/** Writes `file`: a Playbook named `name` whose spec has `tasks`, as `playbook run -f` reads it. */
export function writePlaybook(file: string, name: string, tasks: unknown[]): string {
  writeFileSync(
    file,
    stringify({ apiVersion: "playbook.dev/v1alpha1", kind: "Playbook", metadata: { name }, spec: { tasks } }),
  );
  return file;
}

/** The plan's defaults the controller hands a pod when its own flags are at their defaults. */
export const POD_PLAN_DEFAULTS = {
  ceilingMs: 3_600_000,
  maxCeilingMs: 86_400_000,
  stallMs: 600_000,
  killGraceMs: 10_000,
};

/** A termination log's path, in a new temporary folder named from `prefix`. */
export function terminationLog(prefix: string): string {
  return join(mkdtempSync(join(tmpdir(), prefix)), "termination-log");
}

/** Starts `playbook pod-runner --termination-log <log>` on `plan` (as $PLAYBOOK_PLAN), with only PATH
 * and `env` besides; stdin ignored, stdout and stderr piped. */
export function spawnPodRunner(log: string, plan: object, env: NodeJS.ProcessEnv = {}) {
  return spawn(process.execPath, [CLI, "pod-runner", "--termination-log", log], {
    env: { PATH: process.env.PATH, ...env, PLAYBOOK_PLAN: JSON.stringify(plan) },
    stdio: ["ignore", "pipe", "pipe"],
  });
}
