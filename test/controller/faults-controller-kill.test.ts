// Fault: `playbook controller` is SIGKILLed while runs are in flight, and restarted (same
// identity, as a container restarted in its pod, so it takes its Lease back at once). The runs'
// pods are on the scripted node and the seed writes the script: each run's ending (a runner
// report of each reason, or an OOMKilled runner with none), whether its first pod is lost (taken
// by PodGC: it gets a second pod), and the moment of the faults its pod ends in:
//   before  - while the controller runs, some time (seeded) before it is killed;
//   lastMs  - the report accepted by the API server and the controller SIGKILLed right after;
//   down    - while no controller runs (the pod ends unseen; the next process finds it ended);
//   unseen  - the pod starts and ends while no controller runs (no process ever saw it Running);
//   after   - once the restarted process is ready;
//   later   - in a later wave (after more kills).
// Each wave is created and the controller killed a seeded time after (while it makes the pods),
// then killed again as the wave's pods end. Every run must end exactly once (at most one terminal
// status write over every process, none after another) with the ending its script wrote, with
// the pods its script made and no more: no attempt is consumed by a fault. FAULTS_SEED replays.
//
// Counting once: a SIGKILLed process's counters die with it, so the check is per write. Every
// terminal status write is logged (synchronously, right after the API server accepted it) by the
// process that made it; across all processes each run has at most one such line, and the final
// process's playbook_runs_total equals the terminal writes it logged, reason by reason. A run
// whose write was accepted just before a SIGKILL, before the log line, is counted by no process:
// the crash took the counter with it, which a restart cannot undo; the test prints how many.
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import type { V1Pod } from "@kubernetes/client-node";
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
/** The issue's 50 runs by default (FAULTS_KILL_RUNS), in waves of 10, two kills a wave. */
const RUNS = Number.parseInt(process.env.FAULTS_KILL_RUNS ?? "50", 10);
const WAVE = Number.parseInt(process.env.FAULTS_KILL_WAVE ?? "10", 10);
const LOST_SHARE = 0.15;
const MOMENTS = ["before", "lastMs", "down", "unseen", "after", "later"] as const;
type Moment = (typeof MOMENTS)[number];

const { core } = clients();
let namespace: string;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "pb-faults-kill");
});
afterAll(() => deleteTestNamespace(core, namespace));

describe("the controller SIGKILLed while runs end, and restarted", () => {
  it(`ends every run once, as its seeded script wrote, with no attempt consumed by a kill (${RUNS} runs, seed ${SEED})`, async () => {
    const random = seededRandom(SEED);
    const runs = drawRuns(random, "run", RUNS, LOST_SHARE).map((run) => ({
      ...run,
      moment: pick(random, MOMENTS) as Moment,
    }));
    const identity = `faults-kill-${randomBytes(3).toString("hex")}`;
    const port = await freePort();
    // A Lease long enough that a loaded machine's slow renewals do not end a process on their
    // own; a restarted process has the same identity and takes the Lease back at once.
    const args = [
      ...["--namespaces", namespace, "--leader-election-namespace", namespace],
      ...["--leader-election-id", "faults-kill", "--identity", identity],
      ...["--lease-duration", "15s", "--renew-deadline", "10s", "--retry-period", "1s"],
    ];
    const processes: ControllerProcess[] = [];
    let current: ControllerProcess | undefined;
    let kills = 0;
    const killed = new Set<ControllerProcess>();
    /** Exits the test did not cause (a Lease lost on a loaded machine ends the process by design). */
    const selfExits: string[] = [];
    let done = false;
    const start = (): ControllerProcess => {
      const started = spawnFaultController({ kubeconfig: inject("kubeconfig"), port, args });
      processes.push(started);
      current = started;
      // As the kubelet restarts a container that exited: the runs are never left to nobody.
      void started.exited.then(({ code, signal }) => {
        if (done || killed.has(started) || current !== started) return;
        selfExits.push(
          `pid ${started.pid} exited ${code ?? signal} after "${started.logLines().at(-1)?.msg}"`,
        );
        start();
      });
      return started;
    };
    const ready = async () => {
      const replica = current as ControllerProcess;
      await eventually(`controller pid ${replica.pid} to be ready`, async () =>
        (await fetch(`${replica.url}/readyz`).catch(() => undefined))?.status === 200 ? true : undefined,
      );
    };
    /** SIGKILLs the controller; nothing runs until restart(). */
    const kill = async () => {
      const replica = current as ControllerProcess;
      current = undefined;
      killed.add(replica);
      replica.child.kill("SIGKILL");
      await replica.exited;
      kills += 1;
    };
    const context = () => `seed ${SEED} (replay with FAULTS_SEED=${SEED}), ${processes.length} processes`;

    /** The pod a run is on now, started; lost first pods whose second the controller must make. */
    const pods = new Map<string, V1Pod>();
    const awaitingSecond: RunScript[] = [];
    const ended = new Set<string>();
    /** The run's pod ends as scripted, or (its first pod, when lost first) is taken by PodGC. */
    const endOne = async (run: RunScript) => {
      const pod = pods.get(run.name) as V1Pod;
      if (run.lostFirst && pod.metadata?.name === `${run.name}-1`) {
        await losePodToGc(core, pod);
        awaitingSecond.push(run);
        return;
      }
      await endRun(core, pod, run.ending);
      ended.add(run.name);
    };
    const endAll = (which: RunScript[]) => Promise.all(which.map(endOne));
    /** With a controller up: the second pods of lost runs are made; they start and end. */
    const playSeconds = async () => {
      while (awaitingSecond.length > 0) {
        const run = awaitingSecond.shift() as RunScript;
        pods.set(run.name, await startPod(core, await scheduledPod(core, namespace, `${run.name}-2`)));
        await endOne(run);
      }
    };

    start();
    const later: RunScript[] = [];
    try {
      for (let first = 0; first < RUNS; first += WAVE) {
        const wave = runs.slice(first, first + WAVE);
        await ready();
        // Created, then the controller killed a seeded moment after: while it lists, creates
        // pods, or writes their status. Pods of earlier waves left for later end while it is down.
        await Promise.all(wave.map((run) => createPlaybook(namespace, run.name, specFor(run.ending))));
        await sleep(Math.floor(random() * 1_500));
        await kill();
        await endAll(later.splice(0));
        start();
        await ready();
        await playSeconds();
        const when = (moment: Moment) => wave.filter((run) => run.moment === moment);
        for (const run of wave) {
          const pod = await scheduledPod(core, namespace, `${run.name}-1`);
          pods.set(run.name, run.moment === "unseen" ? pod : await startPod(core, pod));
        }

        await endAll(when("before"));
        await sleep(Math.floor(random() * 1_000));
        // Accepted by the API server at the last moment, then the kill.
        await endAll(when("lastMs"));
        await kill();
        await endAll(when("down"));
        for (const run of when("unseen"))
          pods.set(run.name, await startPod(core, pods.get(run.name) as V1Pod));
        await endAll(when("unseen"));
        start();
        await ready();
        await endAll(when("after"));
        await playSeconds();
        later.push(...when("later"));
      }
      // The last wave's late runs end while the controller is down once more.
      await kill();
      await endAll(later.splice(0));
      start();
      await ready();
      await playSeconds();
      expect(ended.size, context()).toBe(RUNS);

      let unsettled = "";
      const settled = await eventually(
        `all ${RUNS} runs to settle (${context()})`,
        async () => {
          const all = await Promise.all(runs.map((run) => getPlaybook(namespace, run.name)));
          unsettled = all
            .filter((playbook) => !finished(playbook))
            .map((p) => `${p.metadata.name} ${p.status?.phase} pod ${p.status?.podName}`)
            .join(", ");
          return all.every(finished) ? all : undefined;
        },
        60_000,
      ).catch((error: unknown) => {
        const tail = current?.output().split("\n").slice(-40).join("\n");
        process.stderr.write(
          `[faults] exits not caused by the test: ${selfExits.join("; ") || "none"}; last controller, its last lines:\n${tail}\n`,
        );
        throw new Error(`${(error as Error).message}; not settled: ${unsettled}`);
      });

      const wrong: string[] = [];
      for (const [i, run] of runs.entries()) {
        const playbook = settled[i];
        const reason = playbook ? condition(playbook, "Succeeded")?.reason : undefined;
        if (reason !== run.ending)
          wrong.push(
            `${run.name} (${run.moment}${run.lostFirst ? ", lost first" : ""}): scripted ${run.ending}, ended ${reason} (${playbook ? condition(playbook, "Succeeded")?.message : ""})`,
          );
        const names = (await podsOf(namespace, run.name)).map((pod) => pod.metadata?.name);
        const attempts = playbook?.status?.podAttempts;
        // A lost pod is force-deleted: the last pod the script made is the one left.
        if (names.join() !== `${run.name}-${scriptedAttempts(run)}` || attempts !== scriptedAttempts(run))
          wrong.push(`${run.name} (${run.moment}): pods ${names.join(", ")}, status.podAttempts ${attempts}`);
      }

      // At most one terminal write per run, over every process that ever ran.
      // What `kubectl describe` shows: no run said to have finished twice (an event may be lost
      // with a SIGKILL: it is written after the status).
      const endEvents = await runEndEvents(core, namespace);
      for (const [name, count] of endEvents) if (count > 1) wrong.push(`${name}: ${count} end events`);
      const withoutEndEvent = runs.filter((run) => !endEvents.has(run.name)).length;
      const writesPerRun = new Map<string, number>();
      for (const replica of processes)
        for (const line of terminalWrites(replica.logLines(), namespace))
          writesPerRun.set(line.name ?? "", (writesPerRun.get(line.name ?? "") ?? 0) + 1);
      for (const [name, writes] of writesPerRun)
        if (writes > 1) wrong.push(`${name}: ${writes} terminal status writes`);
      const uncounted = runs.filter((run) => !writesPerRun.has(run.name)).map((run) => run.name);

      // The last process counts exactly the runs whose terminal write it made (its log lines
      // reach this process through a pipe, a moment after the counter moved).
      const last = current as ControllerProcess;
      const miscounted = await eventually(
        `the last controller's counts to match its logged writes (${context()})`,
        async () => {
          const response = await fetch(`${last.url}/metrics`).catch(() => undefined);
          if (!response?.ok) return undefined;
          const metrics = await response.text();
          const finalWrites = terminalWrites(last.logLines(), namespace);
          const off = ENDINGS.flatMap((reason) => {
            const counted = sample(metrics, "playbook_runs_total", { namespace, reason });
            const written = finalWrites.filter((line) => line.reason === reason).length;
            return counted === written
              ? []
              : [`last process counted ${counted} ${reason} runs but wrote ${written} such statuses`];
          });
          return off.length === 0 ? off : undefined;
        },
        10_000,
      ).catch((error: unknown) => [String(error)]);
      wrong.push(...miscounted);

      process.stderr.write(
        `[faults] controller SIGKILLed ${kills} times over ${RUNS} runs (seed ${SEED}: ` +
          `${MOMENTS.map((m) => `${m} ${runs.filter((r) => r.moment === m).length}`).join(", ")}; ` +
          `first pod lost ${runs.filter((r) => r.lostFirst).length}); ${wrong.length} problems; ` +
          `runs without an end event: ${withoutEndEvent}; terminal writes lost with a SIGKILL: ${uncounted.length}${uncounted.length ? ` (${uncounted.join(", ")})` : ""}; ` +
          `restarted after exiting by itself: ${selfExits.length}${selfExits.length ? ` (${selfExits.join("; ")})` : ""}\n`,
      );
      expect(wrong, context()).toEqual([]);
      expect(kills).toBe(2 * Math.ceil(RUNS / WAVE) + 1);
    } finally {
      done = true;
      for (const replica of processes) replica.child.kill("SIGKILL");
      await Promise.all(processes.map((replica) => replica.exited));
    }
  }, 240_000);
});
