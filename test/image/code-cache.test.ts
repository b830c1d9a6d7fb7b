// The code cache the build leaves in the image (XDG_CACHE_HOME=/opt/playbook/cache, the image's
// user's, mode 700): a container's first `playbook validate` and `playbook run` already start
// from it, and it is refused (the start goes on without it) once its folder is group-writable.
import type { StartedTestContainer } from "testcontainers";
import { beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { startImageContainer } from "./support.js";

const CACHE_HOME = "/opt/playbook/cache";
const FILE = "/home/one-task.yaml";
const ONE_TASK = stringify({
  apiVersion: "playbook.dev/v1alpha1",
  kind: "Playbook",
  metadata: { name: "one-task" },
  spec: { tasks: [{ name: "say", run: "echo said" }] },
});

let container: StartedTestContainer;

/** `playbook ARGS` with NODE_DEBUG=playbook: its exit code and the code cache's notes on stderr. */
async function playbook(...args: string[]): Promise<{ exitCode: number; notes: string[] }> {
  const result = await container.exec(["env", "NODE_DEBUG=playbook", "playbook", ...args]);
  const notes = result.stderr
    .split("\n")
    .flatMap((line) => /^PLAYBOOK \d+: code cache: (.*)$/.exec(line)?.[1] ?? []);
  return { exitCode: result.exitCode, notes };
}

const cacheFile = (kind: string) =>
  new RegExp(
    `^used ${CACHE_HOME}/playbook-controller/code-cache/commands-${kind}-v[\\d.]+-[a-z0-9]+-[0-9a-f]{64}\\.cache$`,
  );

describe("the image's code cache", () => {
  beforeAll(async () => {
    container = await startImageContainer((c) =>
      c.withCopyContentToContainer([{ content: ONE_TASK, target: FILE, mode: 0o644 }]),
    );
  });

  it("is the image user's, private, under XDG_CACHE_HOME", async () => {
    const env = await container.exec([
      "sh",
      "-c",
      'echo "$XDG_CACHE_HOME"; stat -c "%u %a" "$XDG_CACHE_HOME"',
    ]);
    expect(env.stdout.trim().split("\n")).toEqual([CACHE_HOME, "65532 700"]);
  });

  it("is used by a container's first validate and by every run, as the build left it", async () => {
    const validate = await playbook("validate", "-f", FILE);
    expect(validate.exitCode).toBe(0);
    expect(validate.notes).toEqual([expect.stringMatching(cacheFile("validate"))]);
    for (const attempt of [1, 2]) {
      const run = await playbook("run", "-f", FILE);
      expect(run.exitCode, `run ${attempt}`).toBe(0);
      // A run without a cgroup re-executes itself under a child subreaper: each process says.
      expect(run.notes.length, `run ${attempt}`).toBeGreaterThan(0);
      expect(run.notes, `run ${attempt}`).toEqual(
        run.notes.map(() => expect.stringMatching(cacheFile("run"))),
      );
    }
  });

  it("is refused once its folder is group-writable, and the command still works without it", async () => {
    expect((await container.exec(["chmod", "770", CACHE_HOME])).exitCode).toBe(0);
    try {
      const run = await playbook("run", "-f", FILE);
      expect(run.exitCode).toBe(0);
      expect(run.notes.length).toBeGreaterThan(0);
      expect(run.notes).toEqual(
        run.notes.map(() => `not used: ${CACHE_HOME} is writable by its group (mode 770)`),
      );
    } finally {
      await container.exec(["chmod", "700", CACHE_HOME]);
    }
  });
});
