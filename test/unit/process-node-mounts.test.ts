import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, describe, expect, it } from "vitest";
import {
  type ContainerProcess,
  detectMountNamespaces,
  reaperInstalled,
  startContainerProcess,
} from "../harness/process-node/container-process.js";
import { type Mount, type MountStep, planMounts } from "../harness/process-node/mounts.js";

const started: ContainerProcess[] = [];
afterEach(() => {
  for (const container of started.splice(0)) container.signal("SIGKILL");
});

/** A pod folder with one volume folder holding `files`. */
function podWithVolume(files: Record<string, string>) {
  const pod = mkdtempSync(path.join(os.tmpdir(), "mounts-pod-"));
  const volume = path.join(pod, "volumes", "data");
  mkdirSync(volume, { recursive: true });
  for (const [name, content] of Object.entries(files)) writeFileSync(path.join(volume, name), content);
  return { pod, volume };
}

describe("planning a container's mounts", () => {
  const { pod, volume } = podWithVolume({ token: "t" });

  it("covers /run with a tmpfs to make /var/run/secrets/... and mounts shallowest first", () => {
    const mounts: Mount[] = [
      { source: volume, target: "/var/run/secrets/kubernetes.io/serviceaccount", readOnly: true },
      { source: volume, target: "/tmp", readOnly: false },
    ];
    // /tmp covers the pod's folder (under the machine's temp folder here): it is shown again last.
    expect(planMounts(mounts, [pod])).toMatchObject({
      steps: [
        { kind: "tmpfs", target: "/run" },
        { kind: "bind", target: "/tmp" },
        { kind: "bind", target: "/run/secrets/kubernetes.io/serviceaccount" },
        { kind: "expose", path: realpathSync(pod) },
      ],
    });
    expect(planMounts(mounts.slice(0, 1), [pod])).toEqual({
      steps: [
        { kind: "tmpfs", target: "/run" },
        {
          kind: "bind",
          source: volume,
          target: "/run/secrets/kubernetes.io/serviceaccount",
          readOnly: true,
          file: false,
        },
      ],
    });
  });

  it("refuses a mount point it would have to create in this machine's own folders", () => {
    const result = planMounts(
      [{ source: volume, target: "/etc/not-there-on-purpose/x", readOnly: true }],
      [pod],
    );
    expect(result).toEqual({ error: expect.stringContaining("/etc/not-there-on-purpose/x does not exist") });
  });

  it("creates a mount point inside an earlier mount rather than on the machine", () => {
    const result = planMounts(
      [
        { source: volume, target: "/mnt/data/inner/deeper", readOnly: true },
        { source: volume, target: "/mnt/data", readOnly: false },
      ],
      [pod],
    );
    expect(result).toMatchObject({
      steps: [
        { kind: "tmpfs", target: "/mnt" },
        { kind: "bind", target: "/mnt/data" },
        { kind: "bind", target: "/mnt/data/inner/deeper" },
      ],
    });
  });

  it("refuses a file onto a folder", () => {
    const result = planMounts([{ source: path.join(volume, "token"), target: pod, readOnly: true }], []);
    expect(result).toEqual({ error: expect.stringContaining("cannot mount a file") });
  });
});

async function waitUntil(check: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await sleep(20);
  }
}

const tools = detectMountNamespaces();

describe.runIf(tools !== undefined)("a container with mounts", () => {
  function start(steps: MountStep[], script: string, cwd: string, sharedPidNamespace = false) {
    const dir = mkdtempSync(path.join(os.tmpdir(), "mounts-container-"));
    const errorFile = path.join(dir, "start-error");
    const container = startContainerProcess({
      argv: ["/bin/sh", "-c", script],
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
      cwd,
      logFile: path.join(dir, "log"),
      cookie: randomBytes(8).toString("hex"),
      isolation: "pid-namespace",
      mounts: {
        tools: tools as NonNullable<typeof tools>,
        steps,
        errorFile,
        stash: mkdtempSync(path.join(dir, "stash-")),
      },
      sharedPidNamespace,
    });
    started.push(container);
    return { container, log: () => readFileSync(path.join(dir, "log"), "utf8") };
  }

  it("sees a read-only volume at a path this machine lacks, which stays absent and unmounted here", async () => {
    const { pod, volume } = podWithVolume({ token: "secret-token" });
    const secrets = `/var/run/secrets/test-${randomBytes(4).toString("hex")}`;
    const plan = planMounts([{ source: volume, target: secrets, readOnly: true }], [pod]);
    if ("error" in plan) throw new Error(plan.error);
    const { container, log } = start(
      plan.steps,
      `cat ${secrets}/token; echo; (echo x > ${secrets}/other) 2>&1 | grep -o "Read-only file system"; grep -c "${volume}" /proc/self/mountinfo`,
      pod,
    );
    expect(await container.exited).toEqual({ exitCode: 0 });
    expect(log()).toBe("secret-token\nRead-only file system\n1\n");
    expect(existsSync(secrets)).toBe(false);
    expect(readFileSync("/proc/self/mountinfo", "utf8")).not.toContain(volume);
  });

  it("shows the pod's folder again where a volume covers it, and still reads later volumes from it", async () => {
    const { pod, volume } = podWithVolume({ token: "from-the-pod" });
    const scratch = path.join(pod, "volumes", "scratch");
    mkdirSync(scratch);
    const parent = path.dirname(realpathSync(pod));
    const secrets = `/run/test-${randomBytes(4).toString("hex")}`;
    const plan = planMounts(
      [
        { source: scratch, target: parent, readOnly: false },
        { source: volume, target: secrets, readOnly: true },
      ],
      [pod],
    );
    if ("error" in plan) throw new Error(plan.error);
    const { container, log } = start(
      plan.steps,
      `cat ${secrets}/token; echo; ls ${pod}/volumes | sort | tr '\n' ' '; echo > ${parent}/written-inside`,
      pod,
    );
    expect(await container.exited).toEqual({ exitCode: 0 });
    expect(log()).toBe("from-the-pod\ndata scratch ");
    // The covering volume took the write; the machine's folder did not.
    expect(existsSync(path.join(scratch, "written-inside"))).toBe(true);
    expect(existsSync(path.join(parent, "written-inside"))).toBe(false);
  });

  it("mounts a writable folder over an existing one and starts in its working folder inside it", async () => {
    const { pod, volume } = podWithVolume({});
    const target = mkdtempSync(path.join(os.tmpdir(), "mounts-target-"));
    writeFileSync(path.join(target, "host-file"), "");
    const plan = planMounts([{ source: volume, target, readOnly: false }], [pod]);
    if ("error" in plan) throw new Error(plan.error);
    const { container, log } = start(plan.steps, "pwd; ls; echo written > made-inside", target);
    expect(await container.exited).toEqual({ exitCode: 0 });
    expect(log()).toBe(`${target}\n`);
    expect(readFileSync(path.join(volume, "made-inside"), "utf8")).toBe("written\n");
    expect(existsSync(path.join(target, "made-inside"))).toBe(false);
  });

  it.runIf(reaperInstalled())(
    "runs under the sandbox's reaper with shareProcessNamespace, which signals the container's process",
    async () => {
      const { pod, volume } = podWithVolume({ token: "shared" });
      const target = `/run/test-${randomBytes(4).toString("hex")}`;
      const plan = planMounts([{ source: volume, target, readOnly: true }], [pod]);
      if ("error" in plan) throw new Error(plan.error);
      const ready = path.join(pod, "ready");
      const { container, log } = start(
        plan.steps,
        `trap 'cat ${target}/token; exit 7' TERM; touch ${ready}; while true; do sleep 0.05; done`,
        pod,
        true,
      );
      await waitUntil(() => container.mainPid() !== undefined && existsSync(ready));
      container.signal("SIGTERM");
      expect(await container.exited).toEqual({ exitCode: 7 });
      expect(log()).toBe("shared");
    },
  );

  it("reports a mount that fails as a StartError without running the command", async () => {
    const { pod, volume } = podWithVolume({});
    const missing = path.join(pod, "gone");
    const { container, log } = start(
      [{ kind: "bind", source: missing, target: volume, readOnly: false, file: false }],
      "echo ran",
      pod,
    );
    const exit = await container.exited;
    expect(exit).toMatchObject({
      exitCode: 128,
      startError: expect.stringContaining(`error mounting ${missing}`),
    });
    expect(log()).not.toContain("ran");
  });
});
