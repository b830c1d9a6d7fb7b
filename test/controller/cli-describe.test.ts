// `playbook describe` as a user runs it, against the real API server (no controller: the run is
// not started, so its limits are resolved as the controller would resolve them now): the pod's
// whole bound and the longest run with their sources under the namespace's policy, a missing
// Playbook and an unreachable cluster with their messages and exit codes, and the kubectl plugin.
import { execFile } from "node:child_process";
import { mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { stringify } from "yaml";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { type CliResult, startCli } from "../support/cli.js";
import { clients, createPlaybook, kubectlResult } from "./support.js";

const { core } = clients();
const ROOT = path.join(import.meta.dirname, "../..");
let namespace: string;
let kubeconfig: string;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "pb-describe");
  kubeconfig = inject("kubeconfig");
  const policy = {
    apiVersion: "playbook.dev/v1alpha1",
    kind: "PlaybookPolicy",
    metadata: { name: "default" },
    spec: { defaults: { killGrace: "20s" }, maximums: { ceiling: "30m" } },
  };
  const created = await kubectlResult(["-n", namespace, "create", "-f", "-"], stringify(policy));
  expect(created.code, created.stderr).toBe(0);
  await createPlaybook(namespace, "nightly", {
    ceiling: "20m",
    tasks: [
      { name: "build", run: "make", timeout: "5m" },
      { name: "test", run: "make test" },
    ],
  });
});
afterAll(async () => {
  await deleteTestNamespace(core, namespace);
});

const cli = (args: string[]): Promise<CliResult> => startCli(args, { env: { KUBECONFIG: kubeconfig } });

describe("playbook describe", () => {
  it("prints the pod's whole bound and the longest run, each part with where it comes from", async () => {
    const result = await cli(["describe", "nightly", "-n", namespace]);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toBe("");
    const lines = result.stdout.split("\n");
    expect(lines.slice(0, 7)).toEqual([
      "Name:       nightly",
      `Namespace:  ${namespace}`,
      "Phase:      Pending",
      // The CRD's default status, before the controller has seen the run.
      "Succeeded:  Unknown (Pending): the run has not started yet",
      "Policy:     default",
      "Users:      no pod now: the controller's --user-namespaces (auto|on|off) decides when it creates one",
      "Limits:     not started: as the controller would resolve it now (with its built-in defaults; its flags may set others)",
    ]);
    expect(lines).toContain(
      "  pod bound 20m25s (activeDeadlineSeconds 1225): ceiling 20m (spec) + killGrace 20s (policy) + margin 5s; at most 35m5s: ceiling 30m (policy) + killGrace 5m (default) + margin 5s",
    );
    expect(lines).toContain(
      "  longest run: 25m20s from its first pod's creation: startTimeout 5m (default) + ceiling 20m (spec) + killGrace 20s (policy); up to 3 pods (1 + backoffLimit 2 (default)) share the ceiling",
    );
  });

  it("names a missing Playbook and exits 2", async () => {
    const result = await cli(["describe", "no-such", "-n", namespace]);
    expect(result.code).toBe(2);
    expect(result.stdout).toBe("");
    expect(result.stderr).toMatch(
      new RegExp(
        `^playbook: get playbooks\\.playbook\\.dev no-such in namespace ${namespace}: not found \\(context `,
      ),
    );
  });

  it("says the cluster cannot be reached and exits 3", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "describe-unreachable-"));
    const file = path.join(dir, "config");
    writeFileSync(
      file,
      stringify({
        apiVersion: "v1",
        kind: "Config",
        clusters: [{ name: "gone", cluster: { server: "https://127.0.0.1:1" } }],
        users: [{ name: "u", user: { token: "t" } }],
        contexts: [{ name: "gone", context: { cluster: "gone", user: "u" } }],
        "current-context": "gone",
      }),
    );
    const result = await startCli(["describe", "nightly", "--kubeconfig", file]);
    expect(result.code).toBe(3);
    expect(result.stderr).toContain("cannot reach the API server (context gone, server https://127.0.0.1:1)");
  });

  it("runs as `kubectl playbook describe`", async () => {
    const bin = mkdtempSync(path.join(tmpdir(), "describe-plugin-"));
    symlinkSync(path.join(ROOT, "kubectl-playbook"), path.join(bin, "kubectl-playbook"));
    const env = { PATH: `${bin}:${process.env.PATH}`, HOME: process.env.HOME ?? "", KUBECONFIG: kubeconfig };
    const result = await new Promise<CliResult>((resolve) =>
      execFile(
        path.join(inject("binDir"), "kubectl"),
        ["playbook", "describe", "nightly", "-n", namespace],
        { env },
        (error, stdout, stderr) =>
          resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      ),
    );
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/^ {2}pod bound 20m25s /m);
  });
});
