// tools/build.sh as a first-time user meets it: progress while it builds. A small Go module
// stands in for Kubernetes, etcd and helm (PLAYBOOK_TOOLS_TARGETS), built into a temp cache.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const BUILD = join(import.meta.dirname, "../../tools/build.sh");

/** A module with two commands sharing a package whose content is new, so it must be compiled. */
function smallModule(): { dir: string; targets: string } {
  const dir = mkdtempSync(join(tmpdir(), "tools-build-"));
  const mod = join(dir, "mod");
  mkdirSync(join(mod, "shared"), { recursive: true });
  writeFileSync(join(mod, "go.mod"), "module example.com/small\n\ngo 1.21\n");
  writeFileSync(join(mod, "shared", "shared.go"), `package shared\n\nconst Stamp = "${dir}"\n`);
  for (const name of ["first", "second"]) {
    mkdirSync(join(mod, "cmd", name), { recursive: true });
    writeFileSync(
      join(mod, "cmd", name, "main.go"),
      `package main\n\nimport (\n\t"fmt"\n\n\t"example.com/small/shared"\n)\n\nfunc main() { fmt.Println("${name}", shared.Stamp) }\n`,
    );
  }
  return { dir, targets: `first=${mod}:./cmd/first second=${mod}:./cmd/second` };
}

/** The small module's two commands under other names: `named(targets, "etcd", "kubelet")`. */
function named(targets: string, first: string, second: string): string {
  return targets.replace("first=", `${first}=`).replace("second=", `${second}=`);
}

function run(
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
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

describe("tools/build.sh progress", () => {
  it("prints plain progress lines off a terminal: what it builds, packages compiled of the total, time", async () => {
    const { dir, targets } = smallModule();
    const env = {
      PLAYBOOK_TOOLS_CACHE: join(dir, "cache"),
      PLAYBOOK_TOOLS_TARGETS: targets,
      PLAYBOOK_TOOLS_PROGRESS_EVERY: "0",
    };
    const result = await run("bash", [BUILD], env);
    expect(result.stderr).toContain("tools:bin: building first second from ./cmd/first ./cmd/second");
    expect(result.stderr).toMatch(
      /tools:bin: building first second: (counting the packages to compile|\d+\/\d+ packages compiled, (?:\d+m)?\d+s elapsed)/,
    );
    // The shared package and both commands were new to the build cache.
    expect(result.stderr).toMatch(
      /tools:bin: built first second in (?:\d+m)?\d+s: [3-9]\/[3-9] packages compiled/,
    );
    expect(result.stderr).not.toContain("\x1b[");
    expect(result.code).toBe(0);
    const binDir = result.stdout.trim();
    expect(result.stdout.split("\n").filter(Boolean)).toHaveLength(1);
    expect(execFileSync(join(binDir, "second"), { encoding: "utf8" })).toBe(`second ${dir}\n`);

    // Nothing missing: nothing built, nothing said, the same folder printed.
    const again = await run("bash", [BUILD], env);
    expect(again.code).toBe(0);
    expect(again.stdout.trim()).toBe(binDir);
    expect(again.stderr).not.toContain("building");
  });

  it("builds the modules side by side, up to PLAYBOOK_TOOLS_JOBS at once", async () => {
    const one = smallModule();
    const two = smallModule();
    const targets = `${one.targets.replaceAll("first=", "one-a=").replaceAll("second=", "one-b=")} ${two.targets
      .replaceAll("first=", "two-a=")
      .replaceAll("second=", "two-b=")}`;
    const result = await run("bash", [BUILD], {
      PLAYBOOK_TOOLS_CACHE: join(one.dir, "cache"),
      PLAYBOOK_TOOLS_TARGETS: targets,
      PLAYBOOK_TOOLS_PROGRESS_EVERY: "0",
      PLAYBOOK_TOOLS_JOBS: "2",
    });
    expect(result.code).toBe(0);
    expect(result.stderr).toContain("tools:bin: building one-a one-b two-a two-b: ");
    expect(execFileSync(join(result.stdout.trim(), "two-a"), { encoding: "utf8" })).toBe(
      `first ${two.dir}\n`,
    );
  });

  it("shows the compiler's error and fails without printing a folder", async () => {
    const { dir, targets } = smallModule();
    writeFileSync(
      join(dir, "mod", "cmd", "second", "main.go"),
      "package main\n\nfunc main() { undefinedCall() }\n",
    );
    const result = await run("bash", [BUILD], {
      PLAYBOOK_TOOLS_CACHE: join(dir, "cache"),
      PLAYBOOK_TOOLS_TARGETS: targets,
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("undefined: undefinedCall");
    expect(result.stderr).toContain(
      "tools:bin: error: go build of first second (./cmd/first ./cmd/second) failed",
    );
    expect(result.stdout).toBe("");
  });

  it("draws a bar on a terminal that counts up to every package compiled", async () => {
    const { dir, targets } = smallModule();
    const env = {
      PLAYBOOK_TOOLS_CACHE: join(dir, "cache"),
      PLAYBOOK_TOOLS_TARGETS: targets,
      // An empty build cache: the standard library is compiled too, so the build takes seconds.
      GOCACHE: join(dir, "gocache"),
    };
    const result = await run("script", ["-qfec", `bash ${BUILD}`, "/dev/null"], env);
    expect(result.code).toBe(0);
    // The elapsed time reads 1m05s past a minute (a loaded machine compiles slowly).
    const bars = [
      ...result.stdout.matchAll(
        /tools:bin: \[([#-]{24})\] (\d+)\/(\d+) packages, (?:\d+m)?\d+s: first second/g,
      ),
    ];
    expect(bars.length).toBeGreaterThan(1);
    const last = bars.at(-1);
    expect(last?.[1]).toBe("#".repeat(24));
    expect(last?.[2]).toBe(last?.[3]);
    expect(Number(last?.[3])).toBeGreaterThan(10);
    // Counts only go up, as packages are compiled.
    const counts = bars.map((bar) => Number(bar[2]));
    expect(counts).toEqual([...counts].sort((a, b) => a - b));
    expect(result.stdout).toMatch(
      /tools:bin: built first second in (?:\d+m)?\d+s: (\d+)\/\1 packages compiled/,
    );
  }, 240_000);
});

describe("tools/build.sh waiting on the build lock", () => {
  const made: string[] = [];
  afterAll(() => {
    for (const dir of made) rmSync(dir, { recursive: true, force: true });
  });

  /**
   * The lock file of the versioned folder build.sh uses under that cache for binaries of no set
   * (first, second): made by building the small module's binaries once, then removed so that
   * there is something to build again.
   */
  function lockFile(cache: string, targets: string): string {
    const folder = execFileSync("bash", [BUILD], {
      env: { ...process.env, PLAYBOOK_TOOLS_CACHE: cache, PLAYBOOK_TOOLS_TARGETS: targets },
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
    }).trim();
    rmSync(join(folder, "first"));
    rmSync(join(folder, "second"));
    return join(folder, ".lock.other");
  }

  /** Starts a holder of the lock and waits until it holds it. */
  async function hold(lock: string, script: string): Promise<ReturnType<typeof spawn>> {
    const holder = spawn("bash", ["-c", script, "holder", lock], { stdio: ["ignore", "pipe", "inherit"] });
    await new Promise<void>((resolve) => {
      holder.stdout?.on("data", (chunk: Buffer) => {
        if (chunk.toString().includes("holding")) resolve();
      });
    });
    return holder;
  }

  it("says at once and then periodically who holds it and what it builds", async () => {
    const { dir, targets } = smallModule();
    made.push(dir);
    const cache = join(dir, "cache");
    const lock = lockFile(cache, targets);
    // A script that took the lock with `flock 9` (the flock command is gone; the script holds
    // it through its fd 9) and left no note: found among the processes that have the file open.
    const holder = await hold(lock, 'exec 9>"$1"; flock 9; echo holding; sleep 6; exit 0');
    const started = Date.now();
    const result = await run("bash", [BUILD], {
      PLAYBOOK_TOOLS_CACHE: cache,
      PLAYBOOK_TOOLS_TARGETS: targets,
      PLAYBOOK_TOOLS_LOCK_REPORT_EVERY: "1",
    });
    expect(result.code, result.stderr).toBe(0);
    const waits = result.stderr.split("\n").filter((line) => line.includes("waiting for the build lock"));
    expect(waits.length).toBeGreaterThanOrEqual(2);
    expect(waits[0]).toMatch(
      new RegExp(
        `^tools:bin: waiting for the build lock ${lock} \\(0s so far\\), held by pid ${holder.pid} \\(bash -c .*\\), ` +
          `running since .* \\(\\d+s\\), run by: .*; it builds what is missing in .*: first second$`,
      ),
    );
    expect(waits[1]).toMatch(/\(\ds so far\)/);
    expect(result.stderr).toMatch(/tools:bin: got the build lock after [1-9]s/);
    expect(Date.now() - started).toBeGreaterThan(1_500);
  });

  it("names what the holder builds from the note a tools/build.sh holding it leaves", async () => {
    const { dir, targets } = smallModule();
    made.push(dir);
    const cache = join(dir, "cache");
    const lock = lockFile(cache, targets);
    const holder = await hold(
      lock,
      'exec 9>"$1"; flock 9; printf "pid=%s\\nsince=now\\nbuilding=kubelet (from k8s.io/kubernetes/cmd/kubelet)\\n" $$ >"$1.holder"; echo holding; sleep 2; exit 0',
    );
    const result = await run("bash", [BUILD], {
      PLAYBOOK_TOOLS_CACHE: cache,
      PLAYBOOK_TOOLS_TARGETS: targets,
      PLAYBOOK_TOOLS_LOCK_REPORT_EVERY: "1",
    });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toMatch(
      new RegExp(
        `waiting for the build lock .*held by pid ${holder.pid} .*; it builds kubelet \\(from k8s\\.io/kubernetes/cmd/kubelet\\)\\n`,
      ),
    );
  });
});

describe("tools/build.sh sets (PLAYBOOK_TOOLS_SET)", () => {
  const made: string[] = [];
  const started: ChildProcess[] = [];
  afterAll(() => {
    for (const child of started) if (child.exitCode === null) child.kill("SIGKILL");
    for (const dir of made) rmSync(dir, { recursive: true, force: true });
  });

  it("refuses a set it does not know, naming the variable and the value, and builds nothing", async () => {
    const { dir, targets } = smallModule();
    made.push(dir);
    const result = await run("bash", [BUILD], {
      PLAYBOOK_TOOLS_CACHE: join(dir, "cache"),
      PLAYBOOK_TOOLS_TARGETS: named(targets, "kube-apiserver", "kubelet"),
      PLAYBOOK_TOOLS_SET: "nodes",
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toBe(
      "tools:bin: error: PLAYBOOK_TOOLS_SET=nodes is not a set of binaries: expected control-plane, real-node or all\n",
    );
    expect(result.stdout).toBe("");
    expect(existsSync(join(dir, "cache"))).toBe(false);
  });

  it("builds only the binaries of the set asked for; all builds the rest", async () => {
    const { dir, targets } = smallModule();
    made.push(dir);
    const env = {
      PLAYBOOK_TOOLS_CACHE: join(dir, "cache"),
      PLAYBOOK_TOOLS_TARGETS: named(targets, "etcd", "kubelet"),
    };
    const controlPlane = await run("bash", [BUILD], { ...env, PLAYBOOK_TOOLS_SET: "control-plane" });
    expect(controlPlane.code, controlPlane.stderr).toBe(0);
    const binDir = controlPlane.stdout.trim();
    expect(controlPlane.stderr).toContain("tools:bin: building etcd from ./cmd/first");
    expect(controlPlane.stderr).toContain("tools:bin: built the control-plane set's missing binaries in ");
    expect(existsSync(join(binDir, "etcd"))).toBe(true);
    expect(existsSync(join(binDir, "kubelet"))).toBe(false);

    const realNode = await run("bash", [BUILD], { ...env, PLAYBOOK_TOOLS_SET: "real-node" });
    expect(realNode.code, realNode.stderr).toBe(0);
    expect(realNode.stdout.trim()).toBe(binDir);
    expect(realNode.stderr).toContain("tools:bin: building kubelet from ./cmd/second");
    expect(realNode.stderr).not.toMatch(/build(ing|t) etcd/);
    expect(execFileSync(join(binDir, "kubelet"), { encoding: "utf8" })).toBe(`second ${dir}\n`);

    rmSync(join(binDir, "etcd"));
    const all = await run("bash", [BUILD], env);
    expect(all.code, all.stderr).toBe(0);
    expect(all.stderr).toContain("tools:bin: building etcd from ./cmd/first");
    expect(all.stderr).not.toContain("building kubelet");
    expect(all.stderr).toContain("tools:bin: built everything missing in ");
    expect(existsSync(join(binDir, "etcd"))).toBe(true);
  });

  it("does not wait for a build of the other set: missing binaries are built beside it, present ones returned at once", async () => {
    const { dir, targets } = smallModule();
    made.push(dir);
    // A go whose build of the kubelet's package (./cmd/second) takes 20 s longer: the real-node
    // set's build is still running while the control-plane set is asked for.
    const realGo = join(
      execFileSync("bash", [join(import.meta.dirname, "../../tools/install-go.sh")], {
        encoding: "utf8",
      }).trim(),
      "go",
    );
    const slowGo = join(dir, "slow-go");
    mkdirSync(slowGo);
    writeFileSync(
      join(slowGo, "go"),
      `#!/bin/sh\ncase "$*" in build*./cmd/second*) sleep 20 ;; esac\nexec ${realGo} "$@"\n`,
    );
    chmodSync(join(slowGo, "go"), 0o755);
    const env = {
      PLAYBOOK_TOOLS_CACHE: join(dir, "cache"),
      PLAYBOOK_TOOLS_TARGETS: named(targets, "kube-apiserver", "kubelet"),
    };
    const realNode = spawn("bash", [BUILD], {
      env: { ...process.env, ...env, PATH: `${slowGo}:${process.env.PATH}`, PLAYBOOK_TOOLS_SET: "real-node" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    started.push(realNode);
    const realNodeClosed = new Promise((resolve) => realNode.on("close", resolve));
    await new Promise<void>((resolve) => {
      let said = "";
      realNode.stderr?.on("data", (chunk: Buffer) => {
        said += chunk.toString();
        if (/tools:bin: building [^\n]*kubelet/.test(said)) resolve();
      });
    });

    const t0 = Date.now();
    const controlPlane = await run("bash", [BUILD], {
      ...env,
      PLAYBOOK_TOOLS_SET: "control-plane",
      PLAYBOOK_TOOLS_LOCK_REPORT_EVERY: "1",
    });
    expect(controlPlane.code, controlPlane.stderr).toBe(0);
    expect(controlPlane.stderr).not.toContain("waiting for the build lock");
    expect(controlPlane.stderr).toContain("tools:bin: building kube-apiserver from ./cmd/first");
    const binDir = controlPlane.stdout.trim();
    expect(existsSync(join(binDir, "kube-apiserver"))).toBe(true);

    // With its binaries there, asking again returns at once, the other build still running.
    const again = await run("bash", [BUILD], { ...env, PLAYBOOK_TOOLS_SET: "control-plane" });
    expect(again.code).toBe(0);
    expect(again.stdout.trim()).toBe(binDir);
    expect(again.stderr).toBe("");
    expect(realNode.exitCode).toBe(null);
    expect(Date.now() - t0).toBeLessThan(15_000);

    const realNodeCode = await realNodeClosed;
    expect(realNodeCode).toBe(0);
    expect(existsSync(join(binDir, "kubelet"))).toBe(true);
  }, 120_000);

  it("all waits for a build of a set it lacks binaries of, saying who holds that set's lock", async () => {
    const { dir, targets } = smallModule();
    made.push(dir);
    const env = {
      PLAYBOOK_TOOLS_CACHE: join(dir, "cache"),
      PLAYBOOK_TOOLS_TARGETS: named(targets, "kube-apiserver", "kubelet"),
    };
    const built = await run("bash", [BUILD], env);
    expect(built.code, built.stderr).toBe(0);
    const binDir = built.stdout.trim();
    rmSync(join(binDir, "kubelet"));
    const lock = join(binDir, ".lock.real-node");
    const holder = spawn(
      "bash",
      ["-c", 'exec 9>"$1"; flock 9; echo holding; sleep 3; exit 0', "holder", lock],
      {
        stdio: ["ignore", "pipe", "inherit"],
      },
    );
    started.push(holder);
    await new Promise<void>((resolve) =>
      holder.stdout?.on("data", (c: Buffer) => c.toString().includes("holding") && resolve()),
    );
    const result = await run("bash", [BUILD], { ...env, PLAYBOOK_TOOLS_LOCK_REPORT_EVERY: "1" });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toMatch(
      new RegExp(
        `tools:bin: waiting for the build lock ${lock} \\(0s so far\\), held by pid ${holder.pid} .*; it builds what is missing in .*: kubelet\n`,
      ),
    );
    expect(existsSync(join(binDir, "kubelet"))).toBe(true);
  });
});
