// Fault: two replicas of `playbook controller` (processes) with leader election, Playbooks in
// flight, and the leader SIGKILLed. The runs' pods are on the scripted node and the seed writes
// the script (FAULTS_SEED replays it): each run's ending (a runner report of each reason, or an
// OOMKilled runner with none), whether its first pod is lost (taken by PodGC: it gets a second
// pod), and the moment of the fault its pod ends in:
//   before - while the leader leads, some time (seeded) before it is killed;
//   lastMs - the report accepted by the API server and the leader SIGKILLed right after;
//   gap    - after the kill, before the standby holds the Lease (no one leads);
//   after  - once the standby leads.
// The standby takes the Lease once it expires (lease duration 8s, checked every 1s: a bound of 9s
// plus the API round trips, asserted with 2s to spare for a loaded machine), no run gets a pod
// its script did not make, nothing is done twice (at most one terminal status write per run over
// all processes; none by a replica before it held the Lease) and every run settles with the
// ending its script wrote. A replica that exits by itself (a Lease lost to slow renewals ends it
// by design) is restarted with its identity, as the kubelet restarts a container, and counted in
// the printed line. The frozen-leader case is in lifecycle.test.ts. FAULTS_LEADER_RUNS sets the
// number of runs.
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import type { V1Pod } from "@kubernetes/client-node";
import { CoordinationV1Api } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { freePort } from "../harness/processes.js";
import { losePodToGc, scheduledPod, startPod } from "../harness/scripted-node.js";
import {
  type ControllerProcess,
  drawRuns,
  faultSeed,
  pick,
  type RunScript,
  runEndEvents,
  sample,
  scriptedAttempts,
  seededRandom,
  spawnFaultController,
  terminalWrites,
} from "./faults-support.js";
import { ENDINGS, endRun, specFor } from "./scripted-runs.js";
import { clients, condition, createPlaybook, eventually, finished, getPlaybook, podsOf } from "./support.js";

const SEED = faultSeed(8);
const RUNS = Number.parseInt(process.env.FAULTS_LEADER_RUNS ?? "12", 10);
const LOST_SHARE = 0.15;
const MOMENTS = ["before", "lastMs", "gap", "after"] as const;
type Moment = (typeof MOMENTS)[number];
// Long enough that a loaded 2-core machine's slow renewals rarely end a leader on their own.
const LEASE_MS = 8_000;
const RENEW_MS = 6_000;
const RETRY_MS = 1_000;
const TAKEOVER_SLACK_MS = 2_000;

const { core, kubeConfig } = clients();
const coordination = kubeConfig.makeApiClient(CoordinationV1Api);
let namespace: string;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "pb-faults-leader");
});
afterAll(() => deleteTestNamespace(core, namespace));

/** The lines of a replica's log before it took the Lease that show it acting on a run. */
function actedBeforeLeading(replica: ControllerProcess): string[] {
  const lines = replica.logLines();
  const acquired = lines.findIndex((line) => line.msg === "Acquired the leader Lease");
  const before = acquired === -1 ? lines : lines.slice(0, acquired);
  return before
    .filter((line) => ["Updated Playbook status", "Created Pod", "Deleted Pod"].includes(line.msg))
    .map((line) => `${line.msg} ${line.name}`);
}

describe("two controller replicas whose leader is SIGKILLed", () => {
  it(`the standby takes over within the lease, and every run ends once as its seeded script wrote, with no attempt consumed by the kill (${RUNS} runs, seed ${SEED})`, async () => {
    const random = seededRandom(SEED);
    const leaseName = "faults-leader";
    const holder = async () =>
      (await coordination.readNamespacedLease({ namespace, name: leaseName }).catch(() => undefined))?.spec
        ?.holderIdentity;
    const replicas: ControllerProcess[] = [];
    const byIdentity = new Map<string, ControllerProcess[]>();
    const latest = (identity: string) => byIdentity.get(identity)?.at(-1);
    const killed = new Set<ControllerProcess>();
    /** Exits the test did not cause: a replica that loses its Lease on a loaded machine ends by design. */
    const selfExits: string[] = [];
    let done = false;
    const start = async (identity: string): Promise<ControllerProcess> => {
      const replica = spawnFaultController({
        kubeconfig: inject("kubeconfig"),
        port: await freePort(),
        args: [
          "--namespaces",
          namespace,
          "--leader-election-namespace",
          namespace,
          "--leader-election-id",
          leaseName,
          "--identity",
          identity,
          "--lease-duration",
          `${LEASE_MS / 1000}s`,
          "--renew-deadline",
          `${RENEW_MS / 1000}s`,
          "--retry-period",
          `${RETRY_MS}ms`,
        ],
      });
      replicas.push(replica);
      byIdentity.set(identity, [...(byIdentity.get(identity) ?? []), replica]);
      // As the kubelet restarts a container that exited, so the runs are never left to nobody.
      void replica.exited.then(({ code, signal }) => {
        if (done || killed.has(replica) || latest(identity) !== replica) return;
        selfExits.push(
          `${identity} pid ${replica.pid} exited ${code ?? signal} after "${replica.logLines().at(-1)?.msg}"`,
        );
        void start(identity);
      });
      return replica;
    };
    try {
      const first = `replica-a-${randomBytes(3).toString("hex")}`;
      const second = `replica-b-${randomBytes(3).toString("hex")}`;
      await start(first);
      await eventually("the first replica to hold the Lease", async () =>
        (await holder()) === first ? true : undefined,
      );
      const standby = await start(second);
      await eventually("the second replica to wait for the Lease", async () =>
        standby.logLines().some((line) => line.msg === "Waiting for the leader Lease") ? true : undefined,
      );

      const runs = drawRuns(random, "run", RUNS, LOST_SHARE).map((run) => ({
        ...run,
        moment: pick(random, MOMENTS) as Moment,
      }));
      await Promise.all(runs.map((run) => createPlaybook(namespace, run.name, specFor(run.ending))));
      const pods = new Map<string, V1Pod>();
      for (const run of runs)
        pods.set(run.name, await startPod(core, await scheduledPod(core, namespace, `${run.name}-1`)));
      /** Lost first pods whose second pod a leader must make. */
      const awaitingSecond: RunScript[] = [];
      const endOne = async (run: RunScript) => {
        const pod = pods.get(run.name) as V1Pod;
        if (run.lostFirst && pod.metadata?.name === `${run.name}-1`) {
          await losePodToGc(core, pod);
          awaitingSecond.push(run);
          return;
        }
        await endRun(core, pod, run.ending);
      };
      const when = (moment: Moment) => runs.filter((run) => run.moment === moment);
      await Promise.all(when("before").map(endOne));
      await sleep(Math.floor(random() * 2_000));
      const leaderIdentity = (await holder()) ?? "";
      const standbyIdentity = leaderIdentity === first ? second : first;
      // The standby is up and watching the Lease (a replica restarted after exiting by itself may
      // still be starting): the takeover is timed from a kill, not from a start-up.
      await eventually("the standby to wait for the Lease", async () =>
        latest(standbyIdentity)
          ?.logLines()
          .some((line) => line.msg === "Waiting for the leader Lease")
          ? true
          : undefined,
      );
      const leader = latest(leaderIdentity);
      if (!leader) throw new Error(`the Lease is held by ${leaderIdentity}, no replica of this test`);
      // Accepted by the API server at the last moment, then the kill.
      await Promise.all(when("lastMs").map(endOne));
      killed.add(leader);
      leader.child.kill("SIGKILL");
      const killedAt = Date.now();
      await leader.exited;
      // While no one leads: the Lease has not expired yet.
      await Promise.all(when("gap").map(endOne));
      const gapMs = Date.now() - killedAt;
      const takeoverMs = await eventually(
        "the standby to take the Lease",
        async () => ((await holder()) === standbyIdentity ? Date.now() - killedAt : undefined),
        30_000,
      );
      await Promise.all(when("after").map(endOne));
      // The second pods of the lost runs, made by whoever leads now.
      for (const run of awaitingSecond) {
        pods.set(run.name, await startPod(core, await scheduledPod(core, namespace, `${run.name}-2`)));
        await endOne(run);
      }

      let unsettled = "";
      const settled = await eventually(
        `all ${RUNS} runs to settle`,
        async () => {
          const all = await Promise.all(runs.map((run) => getPlaybook(namespace, run.name)));
          unsettled = all
            .filter((playbook) => !finished(playbook))
            .map((p) => `${p.metadata.name} ${p.status?.phase}`)
            .join(", ");
          return all.every(finished) ? all : undefined;
        },
        90_000,
      ).catch((error: unknown) => {
        throw new Error(`${(error as Error).message}; not settled: ${unsettled}`);
      });

      const wrong: string[] = [];
      for (const [i, run] of runs.entries()) {
        const playbook = settled[i];
        const reason = playbook ? condition(playbook, "Succeeded")?.reason : undefined;
        if (reason !== run.ending)
          wrong.push(`${run.name} (${run.moment}): scripted ${run.ending}, ended ${reason}`);
        // A lost pod is force-deleted: the last pod the script made is the one left.
        const names = (await podsOf(namespace, run.name)).map((pod) => pod.metadata?.name);
        const attempts = playbook?.status?.podAttempts;
        if (names.join() !== `${run.name}-${scriptedAttempts(run)}` || attempts !== scriptedAttempts(run))
          wrong.push(`${run.name} (${run.moment}): pods ${names.join(", ")}, status.podAttempts ${attempts}`);
      }
      // What `kubectl describe` shows: no run said to have finished twice (an event may be lost
      // with a SIGKILL: it is written after the status).
      const endEvents = await runEndEvents(core, namespace);
      for (const [name, count] of endEvents) if (count > 1) wrong.push(`${name}: ${count} end events`);
      const withoutEndEvent = runs.filter((run) => !endEvents.has(run.name)).length;
      const writesPerRun = new Map<string, number>();
      for (const replica of replicas)
        for (const line of terminalWrites(replica.logLines(), namespace))
          writesPerRun.set(line.name ?? "", (writesPerRun.get(line.name ?? "") ?? 0) + 1);
      for (const [name, writes] of writesPerRun)
        if (writes > 1) wrong.push(`${name}: ${writes} terminal status writes`);
      // A write the API server accepted just before the SIGKILL, before its log line, is logged by nobody.
      const unlogged = runs.filter((run) => !writesPerRun.has(run.name)).map((run) => run.name);
      for (const replica of replicas)
        for (const line of actedBeforeLeading(replica))
          wrong.push(`pid ${replica.pid} before it led: ${line}`);

      // The standby counts exactly the runs whose terminal write it made (its log lines reach
      // this process through a pipe, a moment after the counter moved).
      const last = latest(standbyIdentity) ?? standby;
      let standbyWrites = terminalWrites(last.logLines(), namespace);
      const miscounted = await eventually(
        "the standby's counts to match its logged writes",
        async () => {
          const response = await fetch(`${last.url}/metrics`).catch(() => undefined);
          if (!response?.ok) return undefined;
          const metrics = await response.text();
          standbyWrites = terminalWrites(last.logLines(), namespace);
          const off = ENDINGS.flatMap((reason) => {
            const counted = sample(metrics, "playbook_runs_total", { namespace, reason });
            const written = standbyWrites.filter((line) => line.reason === reason).length;
            return counted === written ? [] : [`standby counted ${counted} ${reason} runs, wrote ${written}`];
          });
          return off.length === 0 ? off : undefined;
        },
        10_000,
      ).catch((error: unknown) => [String(error)]);
      wrong.push(...miscounted);
      const leaderWrites = terminalWrites(leader.logLines(), namespace).length;

      process.stderr.write(
        `[faults] leader SIGKILLed once with ${RUNS} runs in flight (seed ${SEED}): the standby held the Lease ` +
          `${(takeoverMs / 1000).toFixed(1)}s after the kill (lease ${LEASE_MS / 1000}s); ` +
          `${RUNS - new Set(wrong.map((w) => w.split(":")[0])).size} runs settled correctly; terminal writes: ` +
          `leader ${leaderWrites}, standby ${standbyWrites.length}, lost with the SIGKILL ${unlogged.length}; runs without an end event: ${withoutEndEvent}; ` +
          `script: ${MOMENTS.map((m) => `${m} ${when(m).length}`).join(", ")}, first pod lost ` +
          `${runs.filter((r) => r.lostFirst).length}, the gap's pods ended ${gapMs}ms after the kill; replicas restarted after exiting by themselves: ` +
          `${selfExits.length}${selfExits.length ? ` (${selfExits.join("; ")})` : ""}\n`,
      );
      expect(wrong, `seed ${SEED} (replay with FAULTS_SEED=${SEED})`).toEqual([]);
      expect(takeoverMs).toBeLessThan(LEASE_MS + RETRY_MS + TAKEOVER_SLACK_MS);
    } finally {
      done = true;
      for (const replica of replicas) replica.child.kill("SIGKILL");
      await Promise.all(replicas.map((replica) => replica.exited));
    }
  }, 170_000);
});
