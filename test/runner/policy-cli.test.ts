// `playbook validate --policy` and `playbook run --policy`: a Playbook checked on a laptop against
// its namespace's PlaybookPolicy, with the built CLI in a real process.
import { existsSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { startCli as cli } from "../support/cli.js";

function file(name: string, object: object): string {
  const path = join(mkdtempSync(join(tmpdir(), "policy-cli-")), name);
  writeFileSync(path, stringify(object));
  return path;
}

const playbook = (spec: object) =>
  file("playbook.yaml", {
    apiVersion: "playbook.dev/v1alpha1",
    kind: "Playbook",
    metadata: { name: "nightly" },
    spec,
  });
const policy = (spec: object) =>
  file("policy.yaml", {
    apiVersion: "playbook.dev/v1alpha1",
    kind: "PlaybookPolicy",
    metadata: { name: "default" },
    spec,
  });

const POLICY = {
  defaults: { ceiling: "20m", stall: "1m" },
  maximums: { ceiling: "1h", taskTimeout: "10m" },
  allowedServiceAccounts: ["runner"],
  allowedImages: ["registry.example/*"],
};

describe("playbook validate --policy", () => {
  it("shows the policy's defaults with source policy", async () => {
    const result = await cli([
      "validate",
      "-f",
      playbook({ tasks: [{ name: "build", run: "make", timeout: "5m" }] }),
      "--policy",
      policy(POLICY),
    ]);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("ceiling 20m (policy), stall 1m (policy), killGrace 10s (default)");
    expect(result.stdout).toContain("task build: timeout 5m (task), stall 1m (policy)");
  });

  it("refuses what the policy refuses with exit 2, naming each field, its value and the bound", async () => {
    const result = await cli([
      "validate",
      "-f",
      playbook({
        ceiling: "2h",
        serviceAccountName: "admin",
        image: "docker.io/library/busybox",
        tasks: [{ name: "build", run: "make", timeout: "30m" }],
      }),
      "--policy",
      policy(POLICY),
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(
      "spec.ceiling: 2h is longer than the namespace's maximum ceiling 1h (PlaybookPolicy default, spec.maximums.ceiling)",
    );
    expect(result.stderr).toContain(
      "spec.tasks[0].timeout: 30m is longer than the namespace's maximum task timeout 10m",
    );
    expect(result.stderr).toContain('spec.serviceAccountName: "admin" is not an allowed service account');
    expect(result.stderr).toContain('spec.image: "docker.io/library/busybox" is not an allowed image');
  });

  it("says which field of a bad policy file is wrong", async () => {
    const result = await cli([
      "validate",
      "-f",
      playbook({ tasks: [{ name: "build", run: "make" }] }),
      "--policy",
      policy({ maximums: { ceiling: "2 hours", runingPlaybooks: 3 } }),
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/--policy .*policy\.yaml: invalid PlaybookPolicy/);
    expect(result.stderr).toContain("spec.maximums.ceiling:");
    expect(result.stderr).toContain("spec.maximums.runingPlaybooks: unknown field");
  });

  it("refuses an image pattern whose * is not a path boundary, naming the index and the value", async () => {
    const result = await cli([
      "validate",
      "-f",
      playbook({ image: "registry.example.com.evil.io/x", tasks: [{ name: "a", run: "true" }] }),
      "--policy",
      policy({ allowedImages: ["registry.example/*", "ghcr.io/x/y:1", "registry.example.com*"] }),
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/--policy .*policy\.yaml: invalid PlaybookPolicy/);
    expect(result.stderr).toContain(
      'spec.allowedImages[2]: "registry.example.com*" must be an exact image or end in "/*"',
    );
  });

  it("says when the policy file is missing", async () => {
    const result = await cli([
      "validate",
      "-f",
      playbook({ tasks: [{ name: "a", run: "true" }] }),
      "--policy",
      "/nonexistent/policy.yaml",
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("--policy /nonexistent/policy.yaml: no such file");
  });
});

describe("playbook run --policy", () => {
  it("runs nothing when the policy refuses the Playbook", async () => {
    const witness = join(mkdtempSync(join(tmpdir(), "policy-cli-")), "ran");
    const result = await cli([
      "run",
      "-f",
      playbook({ ceiling: "2h", tasks: [{ name: "a", run: `touch ${witness}` }] }),
      "--policy",
      policy(POLICY),
    ]);
    expect(result.code).toBe(2);
    expect(existsSync(witness)).toBe(false);
  });

  it("runs nothing from an image beyond a /* pattern's path", async () => {
    const witness = join(mkdtempSync(join(tmpdir(), "policy-cli-")), "ran");
    const result = await cli([
      "run",
      "-f",
      playbook({ image: "registry.example.evil/x", tasks: [{ name: "a", run: `touch ${witness}` }] }),
      "--policy",
      policy(POLICY),
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('spec.image: "registry.example.evil/x" is not an allowed image');
    expect(existsSync(witness)).toBe(false);
  });

  it("runs under the policy's defaults", async () => {
    const result = await cli([
      "run",
      "-f",
      playbook({ tasks: [{ name: "a", run: "echo hello" }] }),
      "--policy",
      policy(POLICY),
      "-o",
      "json",
    ]);
    expect(result.code).toBe(0);
    const object = JSON.parse(result.stdout) as { status: { limits: Record<string, unknown> } };
    expect(object.status.limits.ceiling).toEqual({ value: "20m", source: "policy" });
    expect(object.status.limits.stall).toEqual({ value: "1m", source: "policy" });
  });
});

describe("the grace after the ceiling has a maximum", () => {
  const TERM_IGNORING = (marker: string) => ({
    ceiling: "3s",
    killGrace: "1000h",
    tasks: [{ name: "hold", run: `touch ${marker}; trap '' TERM; sleep 300` }],
  });

  it.each([["validate"], ["run"]])(
    "%s refuses a killGrace over playbook run's own maximum with exit 2, running nothing",
    async (command) => {
      const marker = join(mkdtempSync(join(tmpdir(), "policy-cli-")), "started");
      const result = await cli([command, "-f", playbook(TERM_IGNORING(marker))]);
      expect(result.code).toBe(2);
      expect(result.stderr).toContain(
        "spec.killGrace: 1000h is longer than the maximum killGrace 5m (playbook run's own maximum)",
      );
      expect(existsSync(marker)).toBe(false);
    },
  );

  it.each([["validate"], ["run"]])(
    "%s --policy refuses a killGrace over the policy's maximum, naming it and its level",
    async (command) => {
      const marker = join(mkdtempSync(join(tmpdir(), "policy-cli-")), "started");
      const result = await cli([
        command,
        "-f",
        playbook({ ...TERM_IGNORING(marker), killGrace: "1m" }),
        "--policy",
        policy({ maximums: { killGrace: "30s" } }),
      ]);
      expect(result.code).toBe(2);
      expect(result.stderr).toContain(
        "spec.killGrace: 1m is longer than the namespace's maximum killGrace 30s (PlaybookPolicy default, spec.maximums.killGrace)",
      );
      expect(existsSync(marker)).toBe(false);
    },
  );

  it("validate states the longest a run can take: each pod's queue wait, the requeues and the run's own limits", async () => {
    const queued = {
      queueName: "team-a",
      ceiling: "1h",
      tasks: [{ name: "a", run: "true" }],
      finally: [{ name: "tidy", run: "true" }],
    };
    const governed = await cli([
      "validate",
      "-f",
      playbook(queued),
      "--policy",
      policy({ defaults: { maxPreemptions: 2 }, maximums: { queueTimeout: "30m", maxPreemptions: 3 } }),
    ]);
    expect(governed.stderr).toBe("");
    expect(governed.code).toBe(0);
    expect(governed.stdout).toContain(
      "  at most: ceiling 24h (default), killGrace 5m (default), finallyCeiling 1h (default), queueTimeout 30m (policy), maxPreemptions 3 (policy)\n",
    );
    expect(governed.stdout).toContain(
      "  queue team-a (spec): queueTimeout 30m (policy) per pod, onPreemption Requeue, maxPreemptions 2 (policy)\n",
    );
    // 5 pods × 30m + startTimeout 5m + ceiling 1h + killGrace 10s + finallyCeiling 5m and its killGrace 10s.
    expect(governed.stdout).toContain(
      "  longest run: 3h40m20s from its first pod's creation: up to 5 pods (1 + backoffLimit 2 (default) + maxPreemptions 2 (policy)) each waiting up to queueTimeout 30m (policy) for Kueue, then startTimeout 5m (default) + ceiling 1h (spec) + killGrace 10s (default) + finally tasks 5m10s (finallyCeiling 5m (default) and its killGrace)\n",
    );
    const unbounded = await cli(["validate", "-f", playbook(queued)]);
    expect(unbounded.stdout).toContain("  queue team-a (spec): queueTimeout none per pod");
    expect(unbounded.stdout).toMatch(
      /\n {2}longest run: no bound: up to 8 pods \(1 \+ backoffLimit 2 \(default\) \+ maxPreemptions 5 \(default\)\) each wait for Kueue's admission with no queueTimeout/,
    );
    const plain = await cli([
      "validate",
      "-f",
      playbook({ ceiling: "1h", onPreemption: "Fail", tasks: [{ name: "a", run: "true" }] }),
    ]);
    expect(plain.stdout).not.toContain("  queue ");
    expect(plain.stdout).toContain(
      "  longest run: 1h5m10s from its first pod's creation: startTimeout 5m (default) + ceiling 1h (spec) + killGrace 10s (default); up to 3 pods (1 + backoffLimit 2 (default)) share the ceiling\n",
    );
  });

  it("validate refuses a maxPreemptions past the policy's maximum", async () => {
    const result = await cli([
      "validate",
      "-f",
      playbook({ queueName: "team-a", maxPreemptions: 4, tasks: [{ name: "a", run: "true" }] }),
      "--policy",
      policy({ maximums: { maxPreemptions: 3 } }),
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(
      "spec.maxPreemptions: 4 is more than the namespace's maximum maxPreemptions 3 (PlaybookPolicy default, spec.maximums.maxPreemptions)",
    );
  });

  it("validate shows each maximum with its level", async () => {
    const plain = await cli(["validate", "-f", playbook({ tasks: [{ name: "a", run: "true" }] })]);
    expect(plain.stdout).toContain(
      "  at most: ceiling 24h (default), killGrace 5m (default), finallyCeiling 1h (default)\n",
    );
    const governed = await cli([
      "validate",
      "-f",
      playbook({ tasks: [{ name: "a", run: "true" }] }),
      "--policy",
      policy({ maximums: { killGrace: "30s" } }),
    ]);
    expect(governed.stdout).toContain(
      "  at most: ceiling 24h (default), killGrace 30s (policy), finallyCeiling 1h (default)\n",
    );
  });
});

describe("the policy's maximums bound the pod's whole life", () => {
  // Written before finally tasks existed: it says nothing of them.
  const BEFORE_FINALLY = { maximums: { ceiling: "10m", killGrace: "30s", taskTimeout: "10m" } };

  it.each([["validate"], ["run"]])(
    "%s --policy refuses a finally window that does not fit in maximums.ceiling with exit 2, running nothing",
    async (command) => {
      const marker = join(mkdtempSync(join(tmpdir(), "policy-cli-")), "started");
      const result = await cli([
        command,
        "-f",
        playbook({
          ceiling: "10m",
          killGrace: "30s",
          finallyCeiling: "1h",
          tasks: [{ name: "build", run: `touch ${marker}` }],
          finally: [{ name: "cleanup", run: `touch ${marker}` }],
        }),
        "--policy",
        policy(BEFORE_FINALLY),
      ]);
      expect(result.code).toBe(2);
      expect(result.stderr).toContain(
        "spec.finallyCeiling: the ceiling 10m (spec.ceiling) plus the finally tasks' window, finallyCeiling 1h (spec.finallyCeiling) and killGrace 30s (spec.killGrace), is 1h10m30s, longer than the namespace's maximum ceiling 10m (PlaybookPolicy default, spec.maximums.ceiling), which bounds the finally tasks too: the policy sets no spec.maximums.finallyCeiling",
      );
      expect(existsSync(marker)).toBe(false);
    },
  );

  it("validate --policy shows the pod's whole bound, each part with its level, and the namespace's", async () => {
    const result = await cli([
      "validate",
      "-f",
      playbook({
        ceiling: "7m",
        finallyCeiling: "2m",
        tasks: [{ name: "build", run: "make" }],
        finally: [{ name: "cleanup", run: "./cleanup" }],
      }),
      "--policy",
      policy({ ...BEFORE_FINALLY, defaults: { killGrace: "30s" } }),
    ]);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(
      "  at most: ceiling 10m (policy), killGrace 30s (policy), finallyCeiling within the ceiling's maximum (policy)\n" +
        "  pod bound 10m5s (activeDeadlineSeconds 605): ceiling 7m (spec) + killGrace 30s (policy) + finallyCeiling 2m (spec) + killGrace 30s (policy) + margin 5s; at most 10m35s: ceiling 10m (policy) + killGrace 30s (policy) + margin 5s (the finally tasks' window within the ceiling's maximum: the policy sets no maximums.finallyCeiling)\n",
    );
    // maximums.taskTimeout bounds the tasks that set no timeout, main or finally.
    expect(result.stdout).toContain("  task build: timeout 10m (policy), stall");
    expect(result.stdout).toContain("  finally task cleanup: timeout 10m (policy), stall");
  });

  it("run --policy stops a task without a timeout of its own at maximums.taskTimeout", async () => {
    const result = await cli([
      "run",
      "-f",
      // Without the policy's timeout only the 20s ceiling would stop it (RunCeiling).
      playbook({ ceiling: "20s", killGrace: "0s", tasks: [{ name: "hang", run: "sleep 300" }] }),
      "--policy",
      policy({ maximums: { taskTimeout: "1s" } }),
      "-o",
      "json",
    ]);
    expect(result.code).toBe(124);
    const object = JSON.parse(result.stdout) as {
      status: { limits: Record<string, unknown>; tasks: Record<string, unknown>[] };
    };
    expect(object.status.limits.taskTimeout).toEqual({ value: "1s", source: "policy" });
    expect(object.status.tasks[0]).toMatchObject({
      name: "hang",
      phase: "TimedOut",
      limit: "TaskTimeout",
      limitValue: "1s",
      limitSource: "policy",
    });
  });
});
