// The cluster commands as a user runs them (`playbook submit`, `wait`, `cancel`, and as the kubectl
// plugin), against the real API server with the controller and the scripted node: the exit code
// of every reason through `wait`, and each failure's message and code. What a user sees is
// asserted: stdout, stderr's lines and the exit code.
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { parse, stringify } from "yaml";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { type ClusterState, startControlPlane, stopCluster } from "../harness/control-plane.js";
import { reportFor, reportPod } from "../harness/scripted-node.js";
import { type CliResult, startCli } from "../support/cli.js";
import { EXIT_CASES, running as runningIn } from "./cli-exit-cases.js";
import {
  clients,
  createPlaybook,
  getPlaybook,
  kubectl,
  kubectlResult,
  playbookManifest,
  type RunningController,
  startController,
  waitForPlaybook,
} from "./support.js";

const { core } = clients();
const ROOT = path.join(import.meta.dirname, "../..");
let namespace: string;
let controller: RunningController;
let kubeconfig: string;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "pb-cli");
  // A dozen commands start at once beside the controller on a shared 2-core machine: the Lease
  // times of the real-node tests, so that a slow renew does not stop the controller for good.
  controller = startController([namespace], {
    leaseDuration: "20s",
    renewDeadline: "15s",
    retryPeriod: "2s",
  });
  kubeconfig = inject("kubeconfig");
});
afterAll(async () => {
  await controller?.stop();
  await deleteTestNamespace(core, namespace);
});

/** `playbook ARGS` against the test cluster (KUBECONFIG, as a user has it). */
function cli(args: string[], env: NodeJS.ProcessEnv = {}, stdin?: string): Promise<CliResult> {
  return startCli(args, {
    env: { KUBECONFIG: kubeconfig, ...env },
    ...(stdin === undefined ? {} : { stdin }),
  });
}

/** The run is Running: its pod started and the controller saw it. */
const running = (name: string): Promise<V1Pod> => runningIn(namespace, name);

/**
 * A Playbook being watched by `wait`, started before the run ends (in an object: a promise
 * returned by an async function would be awaited with it).
 */
async function waitingOn(name: string, args: string[] = []): Promise<{ ended: Promise<CliResult> }> {
  // Bounded, so that a failed test leaves no wait behind.
  const ended = cli(["wait", name, "-n", namespace, "--timeout", "100s", ...args]);
  // The wait's list and watch are in place well before the test writes the ending.
  await new Promise((resolve) => setTimeout(resolve, 1_500));
  return { ended };
}

describe("playbook wait exits with the code of the run's reason", () => {
  it.concurrent.for(EXIT_CASES)("$name exits $code", async (exitCase) => {
    const name = `wait-${exitCase.name.toLowerCase()}`;
    await createPlaybook(namespace, name, exitCase.spec);
    const waiting = await waitingOn(name);
    await exitCase.script(namespace, name);
    const result = await waiting.ended;
    expect(result.stderr).toMatch(new RegExp(`^playbook: \\S+ ${exitCase.ending}`, "m"));
    expect(result.code, result.stderr).toBe(exitCase.code);
    expect(result.stdout).toBe("");
    // Once ended, a wait answers at once with the same code.
    const again = await cli(["wait", name, "-n", namespace]);
    expect(again.code, again.stderr).toBe(exitCase.code);
  });
});

function manifestFile(object: unknown): string {
  const file = path.join(mkdtempSync(path.join(tmpdir(), "cli-cluster-")), "playbook.yaml");
  writeFileSync(file, stringify(object));
  return file;
}

describe("playbook submit", () => {
  it("creates the Playbook in -n's namespace and prints its name", async () => {
    const file = manifestFile(playbookManifest("submitted", { tasks: [{ name: "a", run: "true" }] }));
    const result = await cli(["submit", "-f", file, "-n", namespace]);
    expect(result.stderr).toBe("");
    expect(result.stdout).toBe("submitted\n");
    expect(result.code).toBe(0);
    expect((await getPlaybook(namespace, "submitted")).spec.tasks).toMatchObject([
      { name: "a", run: "true" },
    ]);
  });

  it("honours metadata.generateName and the manifest's own namespace", async () => {
    const file = manifestFile({
      apiVersion: "playbook.dev/v1alpha1",
      kind: "Playbook",
      metadata: { generateName: "nightly-", namespace },
      spec: { tasks: [{ name: "a", run: "true" }] },
    });
    const first = await cli(["submit", "-f", file]);
    const second = await cli(["submit", "-f", file]);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toMatch(/^nightly-[a-z0-9]{5}\n$/);
    expect(second.stdout).toMatch(/^nightly-[a-z0-9]{5}\n$/);
    expect(second.stdout).not.toBe(first.stdout);
    await getPlaybook(namespace, first.stdout.trim());
  });

  it("prints the created Playbook with -o json, and reads the manifest from stdin", async () => {
    const manifest = stringify(playbookManifest("from-stdin", { tasks: [{ name: "a", run: "true" }] }));
    const result = await cli(["submit", "-f", "-", "-n", namespace, "-o", "json"], {}, manifest);
    expect(result.code, result.stderr).toBe(0);
    const object = JSON.parse(result.stdout);
    expect(object.metadata).toMatchObject({ name: "from-stdin", namespace });
    expect(object.metadata.uid).toMatch(/^[0-9a-f-]{36}$/);
  });

  it("refuses a bad manifest naming the field, and creates nothing (exit 2)", async () => {
    const file = manifestFile(
      playbookManifest("bad-timeout", { tasks: [{ name: "a", run: "true", timeout: "9x" }] }),
    );
    const result = await cli(["submit", "-f", file, "-n", namespace]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("spec.tasks[0].timeout");
    expect(result.stdout).toBe("");
    const get = await kubectlResult(["-n", namespace, "get", "playbook", "bad-timeout"]);
    expect(get.code).not.toBe(0);
  });

  it("refuses -n that contradicts the manifest's namespace (exit 2)", async () => {
    const file = manifestFile({
      ...playbookManifest("elsewhere", { tasks: [{ name: "a", run: "true" }] }),
      metadata: { name: "elsewhere", namespace: "other" },
    });
    const result = await cli(["submit", "-f", file, "-n", namespace]);
    expect(result.code).toBe(2);
    expect(result.stderr).toBe(
      `playbook: -n ${namespace}: the manifest's metadata.namespace is other (${file}); they must agree\n`,
    );
  });
});

describe("playbook cancel", () => {
  it("sets spec.cancel and returns at once; the run then ends Cancelled, which wait exits 130 for", async () => {
    await createPlaybook(namespace, "cancel-nowait", {
      ceiling: "1m",
      killGrace: "1s",
      tasks: [{ name: "w", run: "sleep 60" }],
    });
    await running("cancel-nowait");
    const result = await cli(["cancel", "cancel-nowait", "-n", namespace]);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toBe("playbook: cancel-nowait cancel requested (spec.cancel: true)\n");
    expect((await getPlaybook(namespace, "cancel-nowait")).spec.cancel).toBe(true);
    const waited = await cli(["wait", "cancel-nowait", "-n", namespace]);
    expect(waited.code, waited.stderr).toBe(130);
  });

  it("--wait exits 130 once the run is Cancelled, and -o json prints the final Playbook", async () => {
    await createPlaybook(namespace, "cancel-wait", {
      ceiling: "1m",
      killGrace: "1s",
      tasks: [{ name: "w", run: "sleep 60" }],
    });
    await running("cancel-wait");
    const result = await cli(["cancel", "cancel-wait", "-n", namespace, "--wait", "-o", "json"]);
    expect(result.code, result.stderr).toBe(130);
    expect(result.stderr).toMatch(/^playbook: cancel-wait cancel requested \(spec\.cancel: true\)$/m);
    expect(result.stderr).toMatch(/^playbook: cancel-wait Cancelled \(Cancelled\): the run was cancelled/m);
    const object = JSON.parse(result.stdout);
    expect(object.spec.cancel).toBe(true);
    expect(object.status.phase).toBe("Cancelled");
    expect(object.status.conditions).toContainEqual(
      expect.objectContaining({ type: "Succeeded", status: "False", reason: "Cancelled" }),
    );
  });

  it("leaves a run that has ended as it is, and --wait exits with its outcome", async () => {
    await createPlaybook(namespace, "cancel-ended", { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
    const pod = await running("cancel-ended");
    await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
    await waitForPlaybook(
      namespace,
      "cancel-ended",
      "to succeed",
      (p) => p.status?.phase === "Succeeded",
      30_000,
    );
    const result = await cli(["cancel", "cancel-ended", "-n", namespace, "--wait"]);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toMatch(/^playbook: cancel-ended had already ended; nothing to cancel$/m);
    expect((await getPlaybook(namespace, "cancel-ended")).spec.cancel).not.toBe(true);
  });
});

describe("wait -o, --timeout and Ctrl-C", () => {
  it("Ctrl-C stops waiting with 130 and says the run goes on", async () => {
    await createPlaybook(namespace, "wait-interrupted", {
      ceiling: "1m",
      tasks: [{ name: "a", run: "sleep 60" }],
    });
    await running("wait-interrupted");
    let child: ChildProcess | undefined;
    const ended = startCli(["wait", "wait-interrupted", "-n", namespace], {
      env: { KUBECONFIG: kubeconfig },
      onSpawn: (spawned) => {
        child = spawned;
      },
    });
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    child?.kill("SIGINT");
    const result = await ended;
    expect(result.code).toBe(130);
    expect(result.stderr).toBe(
      `playbook: stopped waiting for wait-interrupted; the run goes on: \`playbook wait wait-interrupted -n ${namespace}\` again, \`playbook logs -f wait-interrupted -n ${namespace}\`, or \`playbook cancel wait-interrupted -n ${namespace}\`\n`,
    );
    expect((await getPlaybook(namespace, "wait-interrupted")).status?.phase).toBe("Running");
  });

  it("-o yaml prints the final Playbook on stdout", async () => {
    await createPlaybook(namespace, "wait-yaml", { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
    const waiting = await waitingOn("wait-yaml", ["-o", "yaml"]);
    const pod = await running("wait-yaml");
    await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
    const result = await waiting.ended;
    expect(result.code, result.stderr).toBe(0);
    const object = parse(result.stdout);
    expect(object.metadata.name).toBe("wait-yaml");
    expect(object.status.phase).toBe("Succeeded");
  });

  it("--timeout gives up with 4, its own code (not a limit's 124), and says the run goes on", async () => {
    await createPlaybook(namespace, "wait-timeout", {
      ceiling: "1m",
      tasks: [{ name: "a", run: "sleep 60" }],
    });
    await running("wait-timeout");
    const result = await cli(["wait", "wait-timeout", "-n", namespace, "--timeout", "1s"]);
    expect(result.code).toBe(4);
    expect(result.stderr).toBe(
      `playbook: wait-timeout has not ended within --timeout 1s (phase Running); the run goes on: \`playbook wait wait-timeout -n ${namespace}\` again, \`playbook logs -f wait-timeout -n ${namespace}\`, or \`playbook cancel wait-timeout -n ${namespace}\`\n`,
    );
  });
});

/** A kubeconfig for the test cluster as `user`, in the context's `namespace`. */
async function kubeconfigAs(user: Record<string, unknown>, contextNamespace?: string): Promise<string> {
  const admin = parse(await readFile(kubeconfig, "utf8"));
  const cluster = admin.clusters[0];
  const file = path.join(mkdtempSync(path.join(tmpdir(), "cli-kubeconfig-")), "config");
  writeFileSync(
    file,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [cluster],
      users: [{ name: "someone", user }],
      contexts: [
        {
          name: "as-someone",
          context: {
            cluster: cluster.name,
            user: "someone",
            ...(contextNamespace ? { namespace: contextNamespace } : {}),
          },
        },
      ],
      "current-context": "as-someone",
    }),
  );
  return file;
}

describe("errors: one or two lines naming what and where, and the exit code", () => {
  const noStack = (result: CliResult) => {
    expect(result.stderr).not.toMatch(/^\s+at /m);
    expect(result.stderr.trim().split("\n").length).toBeLessThanOrEqual(2);
  };

  it("not found: exit 2, naming the resource, namespace, context and server", async () => {
    const result = await cli(["wait", "no-such-run", "-n", namespace]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(
      new RegExp(
        `^playbook: get playbooks\\.playbook\\.dev no-such-run in namespace ${namespace}: not found \\(context \\S+, server https://127\\.0\\.0\\.1:\\d+\\)\\n$`,
      ),
    );
    const cancel = await cli(["cancel", "no-such-run", "-n", namespace]);
    expect(cancel.code).toBe(2);
    expect(cancel.stderr).toMatch(
      /^playbook: get playbooks\.playbook\.dev no-such-run in namespace \S+: not found/,
    );
    noStack(cancel);
  });

  it("deleted while waited: exit 3, saying so", async () => {
    await createPlaybook(namespace, "deleted-meanwhile", {
      ceiling: "1m",
      tasks: [{ name: "a", run: "sleep 60" }],
    });
    const waiting = await waitingOn("deleted-meanwhile");
    await kubectl(["-n", namespace, "delete", "playbook", "deleted-meanwhile", "--wait=false"]);
    const result = await waiting.ended;
    expect(result.code).toBe(3);
    expect(result.stderr).toMatch(
      new RegExp(
        `^playbook: playbooks\\.playbook\\.dev deleted-meanwhile in namespace ${namespace} was deleted while waiting for its run to end \\(context \\S+, server \\S+\\)\\n$`,
      ),
    );
  });

  it("unreachable: exit 3, naming the server and context", async () => {
    const file = await kubeconfigAs({ token: "anything" }, namespace);
    const config = parse(await readFile(file, "utf8"));
    config.clusters[0].cluster.server = "https://127.0.0.1:1";
    writeFileSync(file, stringify(config));
    const result = await cli(["wait", "anything", "--kubeconfig", file]);
    expect(result.code).toBe(3);
    expect(result.stderr).toBe(
      `playbook: list playbooks.playbook.dev anything in namespace ${namespace}: cannot reach the API server (context as-someone, server https://127.0.0.1:1)\n  connect ECONNREFUSED 127.0.0.1:1\n`,
    );
    const submit = await cli(
      ["submit", "-f", manifestFile(playbookManifest("x", { tasks: [{ name: "a", run: "true" }] }))],
      { KUBECONFIG: file },
    );
    expect(submit.code).toBe(3);
    expect(submit.stderr).toMatch(
      /^playbook: create playbooks\.playbook\.dev x in namespace \S+: cannot reach the API server/,
    );
  });

  it("a kubeconfig or context that does not exist: exit 2", async () => {
    const missing = await cli(["wait", "x", "--kubeconfig", "/nonexistent/kubeconfig"]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toBe(
      "playbook: --kubeconfig /nonexistent/kubeconfig: no such file (/nonexistent/kubeconfig)\n",
    );
    const fromEnv = await cli(["wait", "x"], { KUBECONFIG: "/nonexistent/a:/nonexistent/b" });
    expect(fromEnv.code).toBe(2);
    expect(fromEnv.stderr).toBe("playbook: KUBECONFIG=/nonexistent/a:/nonexistent/b: no such file\n");
    const context = await cli(["wait", "x", "--context", "nope"]);
    expect(context.code).toBe(2);
    expect(context.stderr).toMatch(
      new RegExp(
        `^playbook: --context nope: no such context in kubeconfig KUBECONFIG=${kubeconfig} \\(it has \\S+\\)\\n$`,
      ),
    );
  });

  it("RBAC forbids the verb: exit 2, with what the API server said", async () => {
    await kubectl(["-n", namespace, "create", "serviceaccount", "cli-nobody"]);
    const { stdout: token } = await kubectl(["-n", namespace, "create", "token", "cli-nobody"]);
    const file = await kubeconfigAs({ token: token.trim() }, namespace);
    const wait = await cli(["wait", "anything", "--kubeconfig", file]);
    expect(wait.code).toBe(2);
    expect(wait.stderr).toBe(
      `playbook: list playbooks.playbook.dev anything in namespace ${namespace}: forbidden by RBAC (context as-someone, server ${parse(await readFile(file, "utf8")).clusters[0].cluster.server})\n  the API server said: playbooks.playbook.dev "anything" is forbidden: User "system:serviceaccount:${namespace}:cli-nobody" cannot list resource "playbooks" in API group "playbook.dev" in the namespace "${namespace}"\n`,
    );
    const submit = await cli(
      ["submit", "-f", manifestFile(playbookManifest("x", { tasks: [{ name: "a", run: "true" }] }))],
      { KUBECONFIG: file },
    );
    expect(submit.code).toBe(2);
    expect(submit.stderr).toMatch(
      /^playbook: create playbooks\.playbook\.dev x in namespace \S+: forbidden by RBAC/,
    );
    expect(submit.stderr).toMatch(/cannot create resource "playbooks"/);
    noStack(submit);
  });
});

describe("an API server without the Playbook CRD", () => {
  // A control plane of its own, with nothing installed: the shared one's CRD cannot be taken away
  // from the other tests, and a missing CRD is the API server's answer to give, not this test's.
  let bare: ClusterState | undefined;
  beforeAll(async () => {
    const stateDir = mkdtempSync(path.join(tmpdir(), "cli-no-crd-"));
    bare = (await startControlPlane({ stateDir, binDir: inject("binDir") })).state;
  });
  afterAll(async () => {
    if (bare) await stopCluster(bare);
  });

  it("says the CRD is not installed, naming the server and context (exit 2)", async () => {
    const state = bare as ClusterState;
    const wait = await cli(["wait", "anything"], { KUBECONFIG: state.kubeconfig });
    expect(wait.code).toBe(2);
    expect(wait.stderr).toMatch(
      new RegExp(
        `^playbook: list playbooks\\.playbook\\.dev anything in namespace default: the API server has no resource playbooks\\.playbook\\.dev: is the Playbook CRD installed\\? \\(context \\S+, server ${state.server.replace(/[.]/g, "\\.")}\\)\\n  the API server said: .+\\n$`,
      ),
    );
    const submit = await cli(
      ["submit", "-f", manifestFile(playbookManifest("x", { tasks: [{ name: "a", run: "true" }] }))],
      { KUBECONFIG: state.kubeconfig },
    );
    expect(submit.code).toBe(2);
    expect(submit.stderr).toMatch(
      /^playbook: create playbooks\.playbook\.dev x in namespace default: the API server has no resource playbooks\.playbook\.dev: is the Playbook CRD installed\?/,
    );
  });
});

describe("the kubectl plugin", () => {
  it("is found by `kubectl plugin list` on the PATH and runs as `kubectl playbook`", async () => {
    const bin = mkdtempSync(path.join(tmpdir(), "cli-plugin-"));
    symlinkSync(path.join(ROOT, "kubectl-playbook"), path.join(bin, "kubectl-playbook"));
    const kubectlBin = path.join(inject("binDir"), "kubectl");
    const env = { PATH: `${bin}:${process.env.PATH}`, HOME: process.env.HOME ?? "", KUBECONFIG: kubeconfig };
    const { execFile } = await import("node:child_process");
    const run = (args: string[]) =>
      new Promise<CliResult>((resolve) =>
        execFile(kubectlBin, args, { env }, (error, stdout, stderr) =>
          resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
        ),
      );
    const list = await run(["plugin", "list"]);
    expect(list.stdout).toContain(path.join(bin, "kubectl-playbook"));
    const help = await run(["playbook", "--help"]);
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toMatch(/^Usage: kubectl playbook \[options\] \[command\]$/m);
    await createPlaybook(namespace, "via-kubectl", { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
    const pod = await running("via-kubectl");
    await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
    const wait = await run(["playbook", "wait", "via-kubectl", "-n", namespace]);
    expect(wait.code, wait.stderr).toBe(0);
    expect(wait.stderr).toMatch(/^playbook: via-kubectl Succeeded \(Succeeded\)/m);
    const missing = await run(["playbook", "wait", "no-such", "-n", namespace]);
    expect(missing.code).toBe(2);
  });
});
