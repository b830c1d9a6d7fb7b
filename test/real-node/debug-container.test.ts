// A pod someone changed after its creation, on the real kubelet (issue 53 section 4): `kubectl
// debug` adds an ephemeral container to the run's live pod. One that runs as the runner's user
// (65532) reaches the runner: it writes a report that the run succeeded into the runner's
// termination-message file through /proc/PID/root, then signals the runner (SIGUSR1 opens Node's
// inspector on the pod's loopback) and has it exit 0 on its own, so the runner container ends
// Completed with the forged report and the exit code its reason gives: every check of
// report-trust.ts passes. The run does not end with the forged outcome: RunnerLost, naming the
// debug container, in the status and a PodChanged Warning. One that runs as a user of no one's in
// the pod is refused the signal and /proc/PID/root, and the run ends with its true outcome,
// trusted. Both pass restricted Pod Security (kubectl debug --profile=restricted, the user from
// --custom). The task waits until the debug container's process came and went (the pod shares one
// process namespace), then exits 7: its true outcome is TaskFailed, never a success.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { decodeReport } from "../../src/api/report.js";
import { realNode } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  eventsOf,
  eventually,
  HOLD_FINALIZER,
  kubectl,
  podsOf,
  type RunningController,
  releaseHeldPods,
  startController,
  waitForFinished,
} from "../controller/support.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";

const { core } = clients();
let namespace = "";
let controller: RunningController | undefined;
let customDir = "";
const held: { namespace: string; name: string }[] = [];

/** The word in the debug container's command line the task waits on. */
const PROBE = "debug-probe";

/**
 * The task: wait until a process whose command line holds PROBE came, say so with a process whose
 * argument is SEEN (the debug container waits for it before it acts, so it cannot come and go
 * unseen), wait until it went, then exit 7. Its own command line never holds either word whole
 * (they are put together at run time), nor does `tr`'s.
 */
const SEEN = "probe-seen";
const WAIT_FOR_PROBE = [
  'm=debug-; m=$m"probe"; s=probe-; s=$s"seen"',
  'seen() { for p in /proc/[0-9]*; do case "$(tr "\\0" " " 2>/dev/null < $p/cmdline)" in *"$m"*) return 0;; esac; done; return 1; }',
  "until seen; do sleep 0.2; done",
  "echo probe came",
  // A shell with a loop stays (its argument with it); its output is not the task's to drain.
  "sh -c 'while :; do sleep 1; done' \"$s\" >/dev/null 2>&1 &",
  "while seen; do sleep 0.2; done",
  'kill "$!"',
  "echo probe went",
  "exit 7",
].join("\n");

/**
 * The forger, run by the runner image's node in the debug container: finds the runner, writes a
 * Succeeded report (its start the run's, from the plan the runner reads) into the runner's
 * termination-message file through /proc/PID/root, and makes the runner exit 0 through the
 * inspector its SIGUSR1 opens. Prints what the kernel answered at each step.
 */
const FORGER = `
const fs = require("fs");
const lines = [];
const say = (line) => { console.log(line); lines.push(line); };
(async () => {
  let runner;
  for (const p of fs.readdirSync("/proc")) {
    if (!/^[0-9]+$/.test(p) || Number(p) === process.pid) continue;
    try {
      if (fs.readFileSync("/proc/" + p + "/cmdline", "utf8").split("\\0").includes("pod-runner")) runner = Number(p);
    } catch {}
  }
  say("uid " + process.getuid() + " runner pid " + runner);
  if (!runner) return;
  // Not before the task saw this process.
  const seen = () => fs.readdirSync("/proc").some((p) => {
    try { return fs.readFileSync("/proc/" + p + "/cmdline", "utf8").split("\\0").includes("${SEEN}"); }
    catch { return false; }
  });
  for (let i = 0; i < 600 && !seen(); i++) await new Promise((resolve) => setTimeout(resolve, 100));
  const root = "/proc/" + runner + "/root";
  try {
    const plan = JSON.parse(fs.readFileSync(root + "/run/playbook/plan.json", "utf8"));
    const report = JSON.stringify({ v: 1, phase: "Succeeded", reason: "Succeeded", start: plan.runStartTime,
      end: new Date().toISOString(), tasks: [{ p: "Succeeded" }] });
    fs.writeFileSync(root + "/dev/termination-log", report);
    say("wrote the runner's file");
  } catch (error) {
    say("refused the runner's file: " + error.code);
  }
  try {
    process.kill(runner, "SIGUSR1");
    say("signalled the runner");
  } catch (error) {
    say("refused the signal: " + error.code);
    return;
  }
  let target;
  for (let i = 0; i < 600 && !target; i++) {
    try { [target] = await (await fetch("http://127.0.0.1:9229/json/list")).json(); }
    catch { await new Promise((resolve) => setTimeout(resolve, 100)); }
  }
  if (!target) { say("no inspector"); return; }
  const socket = new WebSocket(target.webSocketDebuggerUrl);
  await new Promise((resolve) => socket.addEventListener("open", resolve));
  // Exits without the runner's exit handlers (its file keeps what was written there), once this
  // session is gone: a process that exits with a debugger attached waits for it to leave.
  const answered = new Promise((resolve) => socket.addEventListener("message", resolve));
  socket.send(JSON.stringify({ id: 1, method: "Runtime.evaluate",
    params: { expression: "setTimeout(() => process.reallyExit(0), 500); 0" } }));
  await answered;
  socket.close();
  for (let i = 0; i < 600 && fs.existsSync("/proc/" + runner); i++) await new Promise((r) => setTimeout(r, 100));
  say(fs.existsSync("/proc/" + runner) ? "the runner still runs" : "the runner exited");
})().catch((error) => say("failed: " + error.stack)).finally(() => {
  // Its own termination message, read from the pod's status however soon the pod goes.
  try { fs.writeFileSync("/dev/termination-log", lines.join("\\n")); }
  catch (error) { console.log("no termination message: " + error.code); }
  process.exit(0);
});
`;

/**
 * `kubectl debug` of the run's pod: an ephemeral container of the runner image as `uid` and `gid`.
 * /proc/PID/root asks the kernel's ptrace access check, which wants the group too: the forger
 * takes the runner's (1000, the pod's spec says it); a signal wants the user alone.
 */
async function debug(pod: string, container: string, uid: number, gid: number): Promise<void> {
  const custom = path.join(customDir, `${container}.json`);
  writeFileSync(custom, JSON.stringify({ securityContext: { runAsUser: uid, runAsGroup: gid } }));
  await kubectl([
    "-n",
    namespace,
    "debug",
    pod,
    `--container=${container}`,
    `--image=${inject("runnerImage")}`,
    "--image-pull-policy=IfNotPresent",
    "--target=runner",
    "--profile=restricted",
    `--custom=${custom}`,
    "--",
    "node",
    "-e",
    FORGER,
    PROBE,
  ]);
}

/** The pod once its runner and its first task container run. */
async function running(name: string): Promise<V1Pod> {
  return eventually(
    `pod ${name}-1 to run`,
    async () => {
      const [pod] = await podsOf(namespace, name);
      const statuses = pod?.status?.containerStatuses ?? [];
      const up = ["runner", "task-1"].every((c) => statuses.find((s) => s.name === c)?.state?.running);
      return up ? pod : undefined;
    },
    realNode.taskStartMs,
  );
}

/** What the debug container said (its termination message), once it and the runner ended. */
async function debugLines(name: string, container: string): Promise<{ lines: string[]; pod: V1Pod }> {
  const pod = await eventually(
    `debug container ${container} and the runner to end`,
    async () => {
      const [pod] = await podsOf(namespace, name);
      const ended = [terminatedOf(pod, container), terminatedOf(pod, "runner")].every(Boolean);
      return ended ? pod : undefined;
    },
    realNode.finishMs,
  );
  // Its termination message, else its log (while the pod is still there).
  let text = terminatedOf(pod, container)?.message ?? "";
  if (text === "") {
    const logs = await kubectl(["-n", namespace, "logs", `${name}-1`, "-c", container]).catch(
      (error: Error) => ({ stdout: `no log: ${error.message}` }),
    );
    const status = pod.status?.ephemeralContainerStatuses?.find((s) => s.name === container);
    text = `${logs.stdout}\nstatus: ${JSON.stringify(status)}`;
  }
  return { lines: text.split("\n").filter((line) => line !== ""), pod };
}

/**
 * Holds the run's pod (a finalizer) so that its status can be read after the run: the controller
 * deletes a pod whose task container outlived its runner.
 */
async function hold(name: string): Promise<void> {
  await kubectl([
    "-n",
    namespace,
    "patch",
    "pod",
    `${name}-1`,
    "--type=merge",
    "-p",
    JSON.stringify({ metadata: { finalizers: [HOLD_FINALIZER] } }),
  ]);
  held.push({ namespace, name: `${name}-1` });
}

const terminatedOf = (pod: V1Pod | undefined, container: string) =>
  [...(pod?.status?.containerStatuses ?? []), ...(pod?.status?.ephemeralContainerStatuses ?? [])].find(
    (s) => s.name === container,
  )?.state?.terminated;

describe("a debug container against the run's outcome, on the real kubelet", () => {
  beforeAll(async () => {
    namespace = await createTestNamespace(core, "rn-debug", {
      "pod-security.kubernetes.io/enforce": "restricted",
      "pod-security.kubernetes.io/enforce-version": "latest",
    });
    customDir = mkdtempSync(path.join(tmpdir(), "debug-custom-"));
    controller = startController([namespace], realNode.controller);
  });
  afterAll(async () => {
    await releaseHeldPods(held);
    await controller?.stop();
    if (namespace) await deleteTestNamespace(core, namespace);
    if (customDir) rmSync(customDir, { recursive: true, force: true });
  });

  it("as the runner's uid, forging a Succeeded report the runner exits 0 on: the run ends RunnerLost naming it, never Succeeded", async () => {
    const name = "forged";
    await createPlaybook(namespace, name, { ceiling: "3m", tasks: [{ name: "wait", run: WAIT_FOR_PROBE }] });
    await running(name);
    await hold(name);
    await debug(`${name}-1`, "forger", 65532, 1000);
    const playbook = await waitForFinished(namespace, name, realNode.finishMs);
    const { lines, pod } = await debugLines(name, "forger");
    // The forge reached the runner: its file, its signal, its exit.
    expect(lines, lines.join("\n")).toEqual([
      expect.stringMatching(/^uid 65532 runner pid \d+$/),
      "wrote the runner's file",
      "signalled the runner",
      "the runner exited",
    ]);
    // The runner ended on its own, exit 0, its message a well-formed Succeeded report: what every
    // check of the report passes.
    const runner = terminatedOf(pod, "runner");
    expect(runner).toMatchObject({ exitCode: 0, reason: "Completed" });
    expect(decodeReport(runner?.message ?? "", 1).reason).toBe("Succeeded");
    // The run does not take it.
    const succeeded = condition(playbook, "Succeeded");
    expect(succeeded).toMatchObject({ status: "False", reason: "RunnerLost" });
    expect(succeeded?.message).toContain(
      "the pod was changed after its creation: ephemeral container forger (target runner) runs as uid 65532 (the runner's), so the runner's termination message is not trusted as its report",
    );
    expect(playbook.status?.tasks?.[0]?.phase).not.toBe("Succeeded");
    const events = await eventsOf(namespace, name, ["PodChanged", "RunFailed"]);
    const changed = events.find((e) => e.reason === "PodChanged");
    expect(changed).toMatchObject({ type: "Warning" });
    expect(changed?.message).toContain(
      "ephemeral container forger (target runner) runs as uid 65532 (the runner's)",
    );
  });

  it("as a user of no one's in the pod: refused the runner's file and signal, the run ends with its true outcome, trusted", async () => {
    const name = "debugged";
    await createPlaybook(namespace, name, { ceiling: "3m", tasks: [{ name: "wait", run: WAIT_FOR_PROBE }] });
    await running(name);
    await hold(name);
    await debug(`${name}-1`, "debugger", 4242, 4242);
    const playbook = await waitForFinished(namespace, name, realNode.finishMs);
    const { lines, pod } = await debugLines(name, "debugger");
    expect(lines, lines.join("\n")).toEqual([
      expect.stringMatching(/^uid 4242 runner pid \d+$/),
      "refused the runner's file: EACCES",
      "refused the signal: EPERM",
    ]);
    // It ran while the runner did: the task waited for it to come and go.
    const ended = Date.parse(String(terminatedOf(pod, "runner")?.finishedAt ?? ""));
    const debugEnded = Date.parse(String(terminatedOf(pod, "debugger")?.finishedAt ?? ""));
    expect(debugEnded).toBeLessThanOrEqual(ended);
    const succeeded = condition(playbook, "Succeeded");
    expect(succeeded).toMatchObject({ status: "False", reason: "TaskFailed" });
    expect(succeeded?.message ?? "").not.toMatch(/unverified|changed/);
    expect(playbook.status?.tasks?.[0]).toMatchObject({ name: "wait", phase: "Failed", exitCode: 7 });
    const events = await eventsOf(namespace, name, ["RunFailed"]);
    expect(events.map((e) => e.reason)).not.toContain("PodChanged");
  });
});
