// `playbook run` with tasks in their own images, through the real podman (configured as
// test/harness/container-engine.ts configures it: the project's storage, runc): the agent
// bind-mounted into each image's container, output live, files passed through /workspace from
// one image to the next, a limit that kills the whole tree inside the container, Ctrl-C, and no
// container left behind whatever ended the run. The images are issue 20's task images
// (test/harness/task-images.ts): Debian, and the static, shell-less one.
import { type ChildProcess, execFile, execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { repoRoot } from "../harness/binaries.js";
import { type ContainerEngine, containerEngine, imageExists } from "../harness/container-engine.js";
import { TASK_IMAGES, type TaskImageKind, taskImageArchive } from "../harness/task-images.js";
import { type CliResult, startCli } from "../support/cli.js";

const run = promisify(execFile);
const log = (message: string) => process.stderr.write(`[local-images] ${message}\n`);

let engine: ContainerEngine;
let cliEnv: NodeJS.ProcessEnv;

/** The task image in podman's storage, loaded from its archive when it is not there yet. */
async function loadTaskImage(kind: TaskImageKind): Promise<string> {
  const name = TASK_IMAGES[kind];
  if (await imageExists(engine, name)) return name;
  const archive = await taskImageArchive(kind, log);
  const { stdout } = await run(engine.command, ["load", "--input", archive], { env: engine.env });
  const loaded = /Loaded image(?:\(s\))?: *(\S+)/.exec(stdout)?.[1];
  if (!loaded) throw new Error(`podman load ${archive} named no image: ${stdout}`);
  if (loaded !== name) await run(engine.command, ["tag", loaded, name], { env: engine.env });
  return name;
}

beforeAll(async () => {
  engine = containerEngine();
  const agent = execFileSync("bash", [join(repoRoot(), "tools", "build-agent.sh")], {
    encoding: "utf8",
  }).trim();
  await loadTaskImage("debian");
  await loadTaskImage("static");
  await loadTaskImage("musl");
  cliEnv = {
    ...Object.fromEntries(Object.entries(engine.env).filter(([name]) => name.startsWith("CONTAINERS_"))),
    PLAYBOOK_CONTAINER_ENGINE: engine.kind,
    PLAYBOOK_AGENT_DIR: dirname(agent),
  };
}, 600_000);

function manifest(spec: object): string {
  const path = join(mkdtempSync(join(tmpdir(), "local-images-")), "playbook.yaml");
  writeFileSync(
    path,
    stringify({ apiVersion: "playbook.dev/v1alpha1", kind: "Playbook", metadata: { name: "images" }, spec }),
  );
  return path;
}

/** Every container of a local run (they carry the label playbook.dev/run), running or not. */
async function runContainers(): Promise<string[]> {
  const { stdout } = await run(
    engine.command,
    ["ps", "--all", "--filter", "label=playbook.dev/run", "--format", "{{.Names}}"],
    { env: engine.env },
  );
  return stdout.split("\n").filter(Boolean);
}

/** Live processes on this machine whose command line holds `mark`. */
function processesWith(mark: string): number[] {
  const found: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/cmdline`, "latin1").includes(mark)) found.push(Number(name));
    } catch {}
  }
  return found;
}

/** Runs the CLI, noting when each line of its stdout came. */
function cliTimed(
  args: string[],
  onSpawn?: (child: ChildProcess) => void,
): Promise<CliResult & { lines: { at: number; text: string }[] }> {
  const lines: { at: number; text: string }[] = [];
  return startCli(args, {
    env: cliEnv,
    onSpawn: (child) => {
      let partial = "";
      child.stdout?.on("data", (chunk: Buffer) => {
        const parts = (partial + chunk.toString()).split("\n");
        partial = parts.pop() ?? "";
        for (const text of parts) lines.push({ at: Date.now(), text });
      });
      onSpawn?.(child);
    },
  }).then((result) => ({ ...result, lines }));
}

describe("playbook run: tasks in their own images through podman", () => {
  it("runs each task in its image with live output, passing files through /workspace", async () => {
    const file = manifest({
      tasks: [
        {
          name: "write",
          image: TASK_IMAGES.debian,
          run: "echo first; echo from-debian > note; id -u; sleep 2; echo second",
        },
        // No shell in this image: the agent's busybox runs the script.
        { name: "read", image: TASK_IMAGES.static, run: "cat /workspace/note; spin hello" },
        // musl's loader and a dynamic binary, no glibc and no shell.
        { name: "musl", image: TASK_IMAGES.musl, run: "spin hello; spin cat note" },
        { name: "here", run: "echo on-the-host" },
      ],
    });
    const result = await cliTimed(["run", "-f", file]);
    expect(result.stderr).toContain(`task write started in ${TASK_IMAGES.debian} (podman, container task-1)`);
    expect(result.stderr).toContain(`task read started in ${TASK_IMAGES.static} (podman, container task-2)`);
    expect(result.code, result.stderr).toBe(0);
    const texts = result.lines.map((line) => line.text);
    expect(texts).toContain("[write] first");
    expect(texts).toContain(`[write] ${process.getuid?.() ?? 0}`);
    expect(texts).toContain("[read] from-debian");
    expect(texts.some((text) => text.startsWith("[read] spin static"))).toBe(true);
    expect(texts.some((text) => text.startsWith("[musl] spin musl-dynamic"))).toBe(true);
    expect(texts).toContain("[musl] from-debian");
    expect(texts).toContain("[here] on-the-host");
    // Live: the first line came while the task still slept, not with the rest at its end.
    const first = result.lines.find((line) => line.text === "[write] first");
    const second = result.lines.find((line) => line.text === "[write] second");
    expect((second?.at ?? 0) - (first?.at ?? 0)).toBeGreaterThan(1500);
    expect(await runContainers()).toEqual([]);
  });

  it("runs a task under its shell in its image, and fails at once one whose image has no such shell", async () => {
    const strict = await cliTimed([
      "run",
      "-f",
      manifest({
        shell: "bash -eo pipefail",
        tasks: [{ name: "dump", image: TASK_IMAGES.debian, run: "false | gzip > /dev/null; echo uploaded" }],
      }),
    ]);
    expect(strict.code, strict.stderr).toBe(1);
    expect(strict.lines.map((line) => line.text)).not.toContain("[dump] uploaded");
    // The static image has no bash, and the busybox does not stand in for it.
    const missing = await cliTimed([
      "run",
      "-f",
      manifest({
        tasks: [{ name: "nobash", image: TASK_IMAGES.static, shell: "bash -e", run: "echo never" }],
      }),
    ]);
    expect(missing.code, missing.stderr).toBe(1);
    expect(missing.stderr).toMatch(
      /task nobash exited with code 127: spec\.tasks\[0\]\.shell "bash -e": container task-1 has no such shell \(bash not found on PATH [^)]*\); the task was not run/,
    );
    expect(missing.lines.map((line) => line.text)).not.toContain("[nobash] never");
    expect(await runContainers()).toEqual([]);
  });

  it("ends the whole tree in the container on TaskTimeout, and removes the container", async () => {
    const mark = `local-timeout-${process.pid}`;
    const file = manifest({
      killGrace: "1s",
      tasks: [{ name: "spin", image: TASK_IMAGES.debian, run: `spin tree ${mark} quiet`, timeout: "3s" }],
    });
    const started = Date.now();
    const result = await cliTimed(["run", "-f", file]);
    expect(result.code, result.stderr).toBe(124);
    expect(result.stderr).toContain("playbook: run Failed (TaskTimeout)");
    expect(result.stderr).toContain("exceeded its 3s timeout");
    expect(Date.now() - started).toBeLessThan(30_000);
    expect(processesWith(mark)).toEqual([]);
    expect(await runContainers()).toEqual([]);
  });

  it("ends what an earlier task left in another image's container when a later task times out", async () => {
    const mark = `local-leftover-${process.pid}`;
    const file = manifest({
      killGrace: "1s",
      tasks: [
        // Succeeds, leaving a process that ignores SIGTERM in its container.
        { name: "leave", image: TASK_IMAGES.debian, run: `spin hold ${mark} >/dev/null 2>&1 & echo left` },
        { name: "slow", image: TASK_IMAGES.static, run: `spin tree ${mark} quiet`, timeout: "2s" },
      ],
    });
    const result = await cliTimed(["run", "-f", file]);
    expect(result.code, result.stderr).toBe(124);
    expect(result.stderr).toContain("playbook: run Failed (TaskTimeout)");
    expect(processesWith(mark)).toEqual([]);
    expect(await runContainers()).toEqual([]);
  });

  it("gives a cooperative task its cancel file in its container", async () => {
    const file = manifest({
      killGrace: "10s",
      tasks: [{ name: "coop", image: TASK_IMAGES.static, run: "spin cooperate", timeout: "2s" }],
    });
    const result = await cliTimed(["run", "-f", file, "-o", "json"]);
    expect(result.code, result.stderr).toBe(124);
    const status = (
      JSON.parse(result.stdout) as {
        status: { tasks: { ending?: string; limit?: string; image?: string }[] };
      }
    ).status;
    expect(status.tasks[0]).toMatchObject({
      limit: "TaskTimeout",
      ending: "Exited",
      image: TASK_IMAGES.static,
    });
    expect(await runContainers()).toEqual([]);
  });

  it("leaves nothing running after Ctrl-C", async () => {
    const mark = `local-interrupt-${process.pid}`;
    const file = manifest({
      killGrace: "1s",
      tasks: [{ name: "spin", image: TASK_IMAGES.debian, run: `spin tree ${mark} loud` }],
    });
    const result = await cliTimed(["run", "-f", file], (child) => {
      child.stdout?.once("data", () => child.kill("SIGINT"));
    });
    expect(result.code, result.stderr).toBe(130);
    expect(result.stderr).toContain("playbook: run Cancelled (Cancelled)");
    expect(processesWith(mark)).toEqual([]);
    expect(await runContainers()).toEqual([]);
  });

  it("leaves nothing running when the runner itself is killed (SIGKILL): the agents end with their connection", async () => {
    const mark = `local-sigkill-${process.pid}`;
    const file = manifest({
      tasks: [{ name: "spin", image: TASK_IMAGES.debian, run: `spin tree ${mark} loud` }],
    });
    await cliTimed(["run", "-f", file], (child) => {
      child.stdout?.once("data", () => child.kill("SIGKILL"));
    });
    // The agent sees its connection close, kills its descendants and exits; --rm removes the container.
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline && ((await runContainers()).length > 0 || processesWith(mark).length > 0)) {
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    expect(processesWith(mark)).toEqual([]);
    expect(await runContainers()).toEqual([]);
  });

  it("refuses an image the engine cannot start, naming it, and leaves no container", async () => {
    const file = manifest({
      tasks: [{ name: "missing", image: "playbook.test/absent:1", run: "true" }],
    });
    const result = await cliTimed(["run", "-f", file]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(
      "container task-1 of task missing (image playbook.test/absent:1) ended before its agent said hello",
    );
    expect(result.stderr).toContain("nothing was run");
    expect(await runContainers()).toEqual([]);
  });
});
