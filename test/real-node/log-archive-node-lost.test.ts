// A run that loses its node keeps its archived log up to the node's silence (issue 58, section 1).
// The kubelet is paused (SIGSTOP): it holds the log follow open through the API server and sends
// nothing, as a node cut off does. Once the controller takes the pod as lost with its node
// (kube-controller-manager's grace, then NODE_SILENCE_MS), the archiver ends the follow
// (follow-watch.ts) and completes attempt 1's object with what arrived: LogArchived False
// NodeLost (in the status, though the run moved on to attempt 2, and in the record beside the
// object), saying how many bytes, when the last arrived and when the node was marked. The
// kubelet killed outright (SIGKILL) ends the follow without an error while the runner still runs:
// that is not a whole log either. The node is restored after each test, whatever happens.
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from "vitest";
import { attemptLogKey, recordKey } from "../../src/controller/log-archive/archive-keys.js";
import { realNode } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  getPlaybook,
  type RunningController,
  startController,
  taskLines,
  waitForFinished,
  waitForPlaybook,
} from "../controller/support.js";
import { type ArchiveOnStore, startArchiveOnStore } from "../harness/archive-on-store.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { waitFor } from "../harness/processes.js";
import {
  continueRealNodeDaemon,
  type KilledDaemon,
  killRealNodeDaemon,
  REAL_NODE_NAME,
  type StoppedDaemon,
  startRealNodeDaemon,
  stopRealNodeDaemon,
} from "../harness/real-node/real-node.js";

const { core } = clients();
const nodeStateDir = path.dirname(inject("kubeconfig"));
let namespace = "";
let archive: ArchiveOnStore | undefined;
let controller: RunningController | undefined;
let paused: StoppedDaemon | undefined;
let killed: KilledDaemon | undefined;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "rn-archive-lost", {
    "pod-security.kubernetes.io/enforce": "restricted",
  });
  archive = await startArchiveOnStore(inject("binDir"), "rn-archive-lost");
  controller = startController([namespace], { ...realNode.controller, ...archive.controllerOptions });
}, 120_000);
afterEach(async () => {
  await restoreNode();
});
afterAll(async () => {
  await restoreNode();
  await controller?.stop();
  if (namespace) await deleteTestNamespace(core, namespace);
  await archive?.stop();
});

/** The kubelet resumed or started again if a test stopped it; waits for the node to be Ready. */
async function restoreNode(): Promise<void> {
  if (!paused && !killed) return;
  if (paused) continueRealNodeDaemon(paused);
  if (killed) await startRealNodeDaemon(nodeStateDir, killed);
  paused = undefined;
  killed = undefined;
  await waitFor(
    `node ${REAL_NODE_NAME} Ready again`,
    async () => {
      const node = await core.readNode({ name: REAL_NODE_NAME });
      return node.status?.conditions?.find((c) => c.type === "Ready")?.status === "True" ? true : undefined;
    },
    { timeoutMs: 90_000, intervalMs: 250 },
  );
}

/** A task that prints `<n> <epoch ms>` every 50 ms until `endAt` (epoch ms). */
function ticker(endAt: number): string {
  return `node -e "let i=0; const t=setInterval(()=>{ console.log(i++ + ' ' + Date.now()); if (Date.now() > ${endAt}) clearInterval(t); }, 50)"`;
}

/** The task's lines in the object: numbers and print times. */
function ticks(object: Buffer): { n: number; at: number }[] {
  return taskLines(object.toString("utf8"), "tick").map((line) => {
    const [n, at] = line.split(" ").map(Number);
    return { n: n as number, at: at as number };
  });
}

const RecordSchemaLike = (raw: string) =>
  JSON.parse(raw) as { bytes: number; sha256: string; reason: string; message: string };

/** Attempt 1's record beside its object once its archive ended (the status moves on to attempt 2). */
async function attemptRecord(run: { namespace: string; name: string; uid: string }, timeoutMs: number) {
  const key = attemptLogKey("", run, 1);
  return waitFor(
    `attempt 1's record of ${run.name} beside its object`,
    async () => {
      const raw = (await archive?.readObject(recordKey(key)))?.toString("utf8") ?? "";
      return raw ? { key, record: RecordSchemaLike(raw) } : undefined;
    },
    { timeoutMs, intervalMs: 500 },
  );
}

/** Waits until the run's first pod prints and its log is being archived; returns the run's identity. */
async function printing(name: string, uid: string) {
  await waitForPlaybook(
    namespace,
    name,
    "to archive attempt 1",
    (p) => condition(p, "LogArchived")?.reason === "Archiving",
    realNode.taskStartMs,
  );
  // A few seconds of lines through the follow before the node goes.
  await new Promise((resolve) => setTimeout(resolve, 3_000));
  return { namespace, name, uid };
}

describe("an archived log whose node is lost", () => {
  it("a silent node (kubelet paused): the follow ends once the pod is taken as lost, NodeLost, the object holds every line up to the silence", async () => {
    const name = "silent";
    // Printing until the node is taken as lost; attempt 2, once the node is back, ends at once.
    const created = await createPlaybook(namespace, name, {
      ceiling: "6m",
      killGrace: "0s",
      backoffLimit: 1,
      tasks: [{ name: "tick", run: ticker(Date.now() + 95_000) }],
    });
    const run = await printing(name, created.metadata.uid as string);
    paused = await stopRealNodeDaemon(nodeStateDir, "kubelet");
    const stoppedAt = Date.now();

    // The node's grace (up to 50 s after its last Lease renewal), the controller's 30 s, the
    // archiver's 5 s of an idle stream and 1 s look, and the status write: a reconcile pass took
    // up to 10 s here while the kubelet was paused.
    const bound = 50_000 + 30_000 + 6_000 + 24_000;
    const said = await waitForPlaybook(
      namespace,
      name,
      "to say how attempt 1's archive ended (it stays Archiving while the follow is open)",
      (p) => {
        const archived = condition(p, "LogArchived");
        return archived?.status !== "Unknown" && (archived?.message ?? "").startsWith("attempt 1: ");
      },
      bound + 40_000,
    );
    const tookMs = Date.now() - stoppedAt;
    const { key, record } = await attemptRecord(run, 10_000);
    process.stderr.write(
      `[log-archive-node-lost] NodeLost ${tookMs} ms after the kubelet stopped: ${record.message}\n`,
    );
    // The status says it, as the record beside the object does (whether attempt 2 is there yet or not).
    expect(condition(said, "LogArchived")).toMatchObject({
      status: "False",
      reason: "NodeLost",
      message: `attempt 1: ${record.message}`,
    });
    expect(record.reason).toBe("NodeLost");
    expect(tookMs).toBeLessThan(bound);

    const object = (await archive?.readObject(key)) as Buffer;
    expect(object.length).toBe(record.bytes);
    // Whole lines, contiguous from the first: nothing in the middle is missing.
    expect(object.toString("utf8").endsWith("\n")).toBe(true);
    const lines = ticks(object);
    expect(lines.length).toBeGreaterThan(20);
    expect(lines.map((l) => l.n)).toEqual(lines.map((_, i) => i));
    // The loss is bounded: the last line archived was printed at most a few seconds before the
    // kubelet stopped (the kubelet sends each line as the runtime writes it).
    const last = lines.at(-1) as { n: number; at: number };
    expect(last.at).toBeLessThanOrEqual(stoppedAt);
    expect(stoppedAt - last.at).toBeLessThan(3_000);

    // The message's figures are the object's.
    const figures = record.message.match(
      /^(\d+) bytes archived, the last at (\S+); the pod's node (\S+) stopped reporting \(marked not Ready at (\S+); [^)]*\): what the task printed after \2, at most (\d+) s of it before the node was marked, is not in it/,
    );
    expect(figures, record.message).not.toBeNull();
    const [, bytes, lastAt, node, markedAt, gap] = figures as RegExpMatchArray;
    expect(Number(bytes)).toBe(object.length);
    expect(node).toBe(REAL_NODE_NAME);
    const arrived = Date.parse(lastAt as string);
    expect(arrived).toBeGreaterThanOrEqual(last.at);
    expect(arrived - last.at).toBeLessThan(3_000);
    expect(Number(gap)).toBe(Math.ceil((Date.parse(markedAt as string) - arrived) / 1000));

    // The controller takes the pod as lost too (its own pass at lostAt): attempt 2 is created,
    // and runs once the node is back; the run ends.
    const moved = await waitForPlaybook(
      namespace,
      name,
      "to re-create its pod",
      (p) => (p.status?.podAttempts ?? 0) >= 2,
      30_000,
    );
    process.stderr.write(
      `[log-archive-node-lost] attempt 2 created ${Date.now() - stoppedAt} ms after the kubelet stopped; LogArchived: ${JSON.stringify(condition(moved, "LogArchived"))}\n`,
    );
    await restoreNode();
    const ended = await waitForFinished(namespace, name, realNode.taskStartMs + realNode.finishMs);
    expect(ended.status).toMatchObject({ podAttempts: 2 });
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
  }, 360_000);

  it("a kubelet killed outright (SIGKILL): its follow ends while the runner still runs, and that is not Archived", async () => {
    const name = "killed";
    const created = await createPlaybook(namespace, name, {
      ceiling: "3m",
      killGrace: "0s",
      tasks: [{ name: "tick", run: ticker(Date.now() + 30_000) }],
    });
    const run = await printing(name, created.metadata.uid as string);
    killed = await killRealNodeDaemon(nodeStateDir, "kubelet");
    const killedAt = Date.now();
    const { key, record } = await attemptRecord(run, 30_000);
    process.stderr.write(
      `[log-archive-node-lost] ${Date.now() - killedAt} ms after the kubelet was killed: ${record.reason}: ${record.message}\n`,
    );
    expect(record.reason).toBe("Incomplete");
    expect(record.message).toMatch(
      /^\d+ bytes archived, the last at \S+; (the log stream ended at \S+ while the runner container still ran \(its kubelet stopped\?\)|the log stream broke: .*): what the task printed after \S+ is not in it$/,
    );
    const object = (await archive?.readObject(key)) as Buffer;
    expect(object.length).toBe(record.bytes);
    const lines = ticks(object);
    expect(lines.map((l) => l.n)).toEqual(lines.map((_, i) => i));

    await restoreNode();
    const ended = await waitForFinished(namespace, name, realNode.finishMs);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    // The status says so too: the attempt's archive is not whole.
    expect(condition(await getPlaybook(namespace, name), "LogArchived")).toMatchObject({
      status: "False",
      reason: "Incomplete",
    });
  }, 240_000);
});
