// The image as it runs: a non-root user, tini as PID 1 reaping what tasks orphan, and the
// version package.json names.
import { readFileSync } from "node:fs";
import path from "node:path";
import type { StartedTestContainer } from "testcontainers";
import { beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { repoRoot } from "../harness/binaries.js";
import { waitFor } from "../harness/processes.js";
import { processTable, startImageContainer } from "./support.js";

// A task that leaves a process behind on purpose: out of its group (setsid), without the attempt's
// cookie and off its pipes, so neither the group kill nor the cookie sweep finds it. A run with a
// containment (here a child subreaper) ends it with the run; one without (PLAYBOOK_CONTAINMENT=none)
// leaves it to PID 1: it lives until /tmp/release exists, then exits, and someone must reap it.
const ORPHAN_PLAYBOOK = stringify({
  apiVersion: "playbook.dev/v1alpha1",
  kind: "Playbook",
  metadata: { name: "orphan" },
  spec: {
    tasks: [
      {
        name: "leave-one-behind",
        run: [
          "env -u PLAYBOOK_ATTEMPT_ID setsid sh -c 'echo $$ > /tmp/orphan.pid; while [ ! -e /tmp/release ]; do sleep 0.1; done' </dev/null >/dev/null 2>&1 &",
          "until [ -s /tmp/orphan.pid ]; do sleep 0.1; done",
          "echo left one behind",
        ].join("\n"),
      },
    ],
  },
});

const withOrphanPlaybook = (c: Parameters<Parameters<typeof startImageContainer>[0] & object>[0]) =>
  c.withCopyContentToContainer([{ content: ORPHAN_PLAYBOOK, target: "/home/orphan.yaml", mode: 0o644 }]);

/**
 * Runs the orphaning Playbook without containment, checks its leftover was handed to PID 1 and
 * lets it exit; returns its pid.
 */
async function releaseOrphan(container: StartedTestContainer): Promise<number> {
  const run = await container.exec([
    "env",
    "PLAYBOOK_CONTAINMENT=none",
    "playbook",
    "run",
    "-f",
    "/home/orphan.yaml",
  ]);
  expect(run.output).toContain("left one behind");
  expect(run.exitCode).toBe(0);
  const pid = Number((await container.exec(["cat", "/tmp/orphan.pid"])).stdout.trim());
  const orphan = (await processTable(container)).find((p) => p.pid === pid);
  expect(orphan, "the task's leftover, still running after the run").toMatchObject({ ppid: 1 });
  expect((await container.exec(["touch", "/tmp/release"])).exitCode).toBe(0);
  return pid;
}

describe("the image as it runs", () => {
  let container: StartedTestContainer;
  beforeAll(async () => {
    container = await startImageContainer(withOrphanPlaybook);
  });

  it("runs as user 65532, not root", async () => {
    const init = (await processTable(container)).find((p) => p.pid === 1);
    expect(init?.uid).toBe(65532);
    const id = await container.exec(["id", "-u"]);
    expect(id.stdout.trim()).toBe("65532");
  });

  it("has tini as PID 1", async () => {
    const init = (await processTable(container)).find((p) => p.pid === 1);
    expect(init?.comm).toBe("tini");
  });

  it("prints package.json's version for playbook --version", async () => {
    const { version } = JSON.parse(readFileSync(path.join(repoRoot(), "package.json"), "utf8")) as {
      version: string;
    };
    const result = await container.exec(["playbook", "--version"]);
    expect(result.exitCode).toBe(0);
    expect(result.stdout.trim()).toBe(version);
  });

  it("ships the project's LICENSE and the bundled packages' licences and SBOM under /usr/share/doc", async () => {
    const doc = "/usr/share/doc/playbook-controller";
    const license = await container.exec(["cat", `${doc}/LICENSE`]);
    expect(license.stdout).toBe(readFileSync(path.join(repoRoot(), "LICENSE"), "utf8"));
    const notices = await container.exec(["cat", `${doc}/THIRD-PARTY-NOTICES.txt`]);
    expect(notices.stdout).toMatch(/^ {2}zod@\S+ \(MIT\)$/m);
    expect(notices.stdout).toMatch(/^ {2}@kubernetes\/client-node@\S+ \(Apache-2.0\)$/m);
    const sbom = await container.exec(["cat", `${doc}/sbom.cdx.json`]);
    expect(JSON.parse(sbom.stdout)).toMatchObject({ bomFormat: "CycloneDX" });
  });

  it("holds the task containers' agent and busybox, both static and runnable by the image's user", async () => {
    const lib = "/usr/local/lib/playbook";
    const usage = await container.exec([`${lib}/agent`]);
    expect({ exitCode: usage.exitCode, stderr: usage.stderr.trim() }).toEqual({
      exitCode: 2,
      stderr: "usage: agent SOCKET CONTAINER | agent --install DIR",
    });
    // What a pod's postStart hook runs (--agent-delivery post-start): both files placed, runnable.
    const placed = await container.exec([
      "sh",
      "-c",
      `mkdir -p /tmp/placed && ${lib}/agent --install /tmp/placed && ${lib}/agent --install /tmp/placed && ls /tmp/placed && /tmp/placed/busybox true`,
    ]);
    expect({ exitCode: placed.exitCode, stdout: placed.stdout }).toEqual({
      exitCode: 0,
      stdout: "agent\nbusybox\n",
    });
    expect((await container.exec([`${lib}/busybox`, "sh", "-c", "echo $((6 * 7))"])).stdout).toBe("42\n");
    // A dynamic program names its loader; these name none, so they run in any image.
    for (const program of ["agent", "busybox"]) {
      const loader = await container.exec([
        "grep",
        "-c",
        "-a",
        "-E",
        "/ld-(linux|musl)",
        `${lib}/${program}`,
      ]);
      expect(loader.stdout.trim(), program).toBe("0");
    }
    const musl = await container.exec(["cat", "/usr/share/doc/playbook-controller/agent/musl/copyright"]);
    expect(musl.stdout).toMatch(/^Files: \*\nCopyright: .*Rich Felker/m);
  });

  it("ends what a task orphaned with the run, and says what held it", async () => {
    await container.exec(["rm", "-f", "/tmp/orphan.pid", "/tmp/release"]);
    const run = await container.exec(["playbook", "run", "-f", "/home/orphan.yaml"]);
    expect(run.output).toContain("left one behind");
    expect(run.output).toMatch(/playbook: containment: (a cgroup v2 sub-group of its own|a child subreaper)/);
    expect(run.exitCode).toBe(0);
    const pid = Number((await container.exec(["cat", "/tmp/orphan.pid"])).stdout.trim());
    expect(pid).toBeGreaterThan(1);
    expect((await processTable(container)).filter((p) => p.pid === pid || p.state === "Z")).toEqual([]);
  });

  it("reaps what a task orphaned in a run without containment, leaving no zombie", async () => {
    const pid = await releaseOrphan(container);
    await waitFor(
      `the orphan ${pid} to be reaped`,
      async () => ((await processTable(container)).some((p) => p.pid === pid) ? undefined : true),
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    expect((await processTable(container)).filter((p) => p.state === "Z")).toEqual([]);
  });

  it("would leave that orphan a zombie without tini (the check above can fail)", async () => {
    const bare = await startImageContainer((c) =>
      withOrphanPlaybook(c).withEntrypoint(["sleep"]).withCommand(["infinity"]),
    );
    expect((await processTable(bare)).find((p) => p.pid === 1)?.comm).toBe("sleep");
    const pid = await releaseOrphan(bare);
    // Only PID 1 can reap it, and sleep never waits for children: state Z is final here.
    const zombie = await waitFor(
      `the orphan ${pid} to exit`,
      async () => (await processTable(bare)).find((p) => p.pid === pid && p.state === "Z"),
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    expect(zombie.ppid).toBe(1);
  });
});
