// The built `playbook` command in a real process, as a user starts it: its exit code and output.
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";

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
