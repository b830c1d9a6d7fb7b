// ./playbook, the quick start's command: it starts the checkout's bundle under the project's Node 24
// at once (no npx install, no npm in the middle), keeps the documented exit codes, Ctrl-C's 130
// included, works through a symlink, and says in one line what to run when the build is missing.
import { spawn, spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";

const ROOT = path.join(import.meta.dirname, "../..");
const SCRIPT = path.join(ROOT, "playbook");

let dir: string | undefined;
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

function playbook(args: string[], options: { cwd?: string; script?: string } = {}) {
  return spawnSync(options.script ?? SCRIPT, args, {
    cwd: options.cwd ?? ROOT,
    encoding: "utf8",
    // Only the system's PATH: the script finds Node 24 itself.
    env: { PATH: "/usr/local/bin:/usr/bin:/bin", HOME: process.env.HOME },
    timeout: 60_000,
  });
}

describe("./playbook", () => {
  it("runs hello.yaml under the project's Node, exit 0", () => {
    const result = playbook(["run", "-f", "examples/hello.yaml"]);
    expect(result.status, result.stderr).toBe(0);
    expect(result.stdout).toContain("[test] all passed");
    expect(result.stderr).toContain("playbook: run Succeeded (Succeeded): all 3 tasks succeeded");
  });

  it("passes the exit codes through: the same code as the bundle run directly, and 2 for bad input", () => {
    const direct = spawnSync(
      path.join(ROOT, "node_modules/.bin/node"),
      [path.join(ROOT, "dist/bin/playbook.js"), "run", "-f", "examples/task-timeout.yaml"],
      { cwd: ROOT, encoding: "utf8", timeout: 60_000 },
    );
    const viaScript = playbook(["run", "-f", "examples/task-timeout.yaml"]);
    expect(viaScript.stderr).toContain("(TaskTimeout)");
    expect(direct.status).not.toBe(0);
    expect(viaScript.status).toBe(direct.status);
    const bad = playbook(["run", "-f", "no-such-file.yaml"]);
    expect(bad.status).toBe(2);
    expect(bad.stderr).toBe(`playbook: -f no-such-file.yaml: no such file (${ROOT}/no-such-file.yaml)\n`);
  });

  it("keeps 130 after Ctrl-C: no npm in the middle to die of it", async () => {
    const child = spawn(SCRIPT, ["run", "-f", "examples/cancel-me.yaml"], {
      cwd: ROOT,
      env: { PATH: "/usr/local/bin:/usr/bin:/bin", HOME: process.env.HOME },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    await new Promise<void>((resolve) => {
      child.stdout.on("data", (chunk: Buffer) => {
        if (chunk.toString().includes("cancel me")) resolve();
      });
    });
    // The script exec'd Node: the pid is the command's own, as a terminal's Ctrl-C would reach it.
    child.kill("SIGINT");
    const code = await new Promise<number | null>((resolve) => child.on("exit", (c) => resolve(c)));
    expect(code, stderr).toBe(130);
  });

  it("works through a symlink, from another folder", () => {
    dir = mkdtempSync(path.join(tmpdir(), "playbook-script-"));
    symlinkSync(SCRIPT, path.join(dir, "playbook"));
    const result = playbook(["run", "-f", path.join(ROOT, "examples/hello.yaml")], {
      cwd: dir,
      script: path.join(dir, "playbook"),
    });
    expect(result.status, result.stderr).toBe(0);
  });

  it("says what to run when npm ci has not been run, or the build is missing", () => {
    dir = mkdtempSync(path.join(tmpdir(), "playbook-script-"));
    const checkout = path.join(dir, "checkout");
    mkdirSync(checkout);
    copyFileSync(SCRIPT, path.join(checkout, "playbook"));
    const script = path.join(checkout, "playbook");
    const noNodeModules = playbook(["--version"], { script });
    expect(noNodeModules.status).toBe(127);
    expect(noNodeModules.stderr).toBe(
      `playbook: ${checkout}/node_modules/.bin/node is missing: run \`npm ci\` in ${checkout} first (it installs Node 24 and builds the command)\n`,
    );
    mkdirSync(path.join(checkout, "node_modules", ".bin"), { recursive: true });
    symlinkSync(path.join(ROOT, "node_modules/.bin/node"), path.join(checkout, "node_modules/.bin/node"));
    const noDist = playbook(["--version"], { script });
    expect(noDist.status).toBe(127);
    expect(noDist.stderr).toBe(
      `playbook: ${checkout}/dist/bin/playbook.js is missing: run \`npm ci\` (or \`npm run build\`) in ${checkout} first\n`,
    );
  });
});
