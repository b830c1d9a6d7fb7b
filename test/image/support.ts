// What the image tests share: the engine's socket in the environment before testcontainers reads
// it, and containers of the project's image that are removed after each test file even when a
// test fails (Ryuk, testcontainers' reaper, is off: its image is on Docker Hub).
import { GenericContainer, PullPolicy, type StartedTestContainer } from "testcontainers";
import { afterAll, inject } from "vitest";

// The image project's global setup never throws (that would end the unit and cluster suites
// too): when the image could not be built, every image test file fails here with the reason.
const imageError = inject("imageError");
if (imageError) throw new Error(imageError);

Object.assign(process.env, inject("engineEnv"));

export const IMAGE = inject("image");
/** The image's PID 1; its entrypoint is `tini -- playbook`, so a container's command is playbook's arguments. */
export const TINI = "/usr/bin/tini";

/** Containers started through this file's helpers; all are removed in afterAll. */
const started: StartedTestContainer[] = [];

afterAll(async () => {
  await Promise.allSettled(started.splice(0).map((c) => c.stop({ timeout: 1_000, remove: true })));
});

/**
 * A container of the image as it runs (tini as PID 1, user 65532) with `sleep infinity` in place
 * of `playbook` after tini's `--`, for exec: no network unless given one.
 */
export async function startImageContainer(
  configure: (container: GenericContainer) => GenericContainer = (c) => c,
): Promise<StartedTestContainer> {
  const container = await configure(
    new GenericContainer(IMAGE)
      .withPullPolicy(PullPolicy.neverPull())
      .withNetworkMode("none")
      .withEntrypoint([TINI, "--"])
      .withCommand(["sleep", "infinity"]),
  ).start();
  started.push(container);
  return container;
}

/** Stops and removes one container now (afterAll still covers it if this fails). */
export async function removeContainer(container: StartedTestContainer): Promise<void> {
  await container.stop({ timeout: 1_000, remove: true });
  started.splice(started.indexOf(container), 1);
}

export interface ProcessEntry {
  pid: number;
  ppid: number;
  state: string;
  comm: string;
  uid: number;
}

/** The container's processes from /proc (pid, parent, state, name, real uid), read by a shell inside it. */
export async function processTable(container: StartedTestContainer): Promise<ProcessEntry[]> {
  // One line per process: "<stat>|<Uid line>"; the exec's own shell and its reads are left out.
  const script =
    'for d in /proc/[0-9]*; do p=$(basename $d); [ "$p" = "$$" ] && continue; s=$(cat $d/stat 2>/dev/null) || continue; ' +
    'u=$(grep "^Uid:" $d/status 2>/dev/null); echo "$s|$u"; done';
  const result = await container.exec(["sh", "-c", script]);
  if (result.exitCode !== 0) throw new Error(`reading /proc failed: ${result.output}`);
  const entries: ProcessEntry[] = [];
  for (const line of result.stdout.split("\n")) {
    const match = /^(\d+) \((.*)\) (\S) (\d+) .*\|Uid:\s+(\d+)/.exec(line);
    if (!match) continue;
    const [, pid, comm, state, ppid, uid] = match;
    entries.push({
      pid: Number(pid),
      comm: comm ?? "",
      state: state ?? "",
      ppid: Number(ppid),
      uid: Number(uid),
    });
  }
  return entries;
}
