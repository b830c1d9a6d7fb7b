// The Playbook's reconciler: one pass for one key. It reads the manager's caches through the
// listers it is given, gathers what the pure decision needs (the run's pods, the policy's slot,
// Kueue's Workloads, the placements, a look at the runner's progress), decides with decide()
// and applies the decision with the writer it is given.
import type { Logger } from "pino";
import { KIND } from "../../api/playbook.js";
import type { ApiClient } from "../../runtime/api-client.js";
import { apiErrorMessage, isNotFound } from "../../runtime/api-errors.js";
import type { Clock } from "../../runtime/clock.js";
import type { Decision, ReconcileInput, ReconcileSettings } from "../decision.js";
import { orphanToRelease } from "../kueue/kueue-finalizer.js";
import { workloadOf } from "../kueue/kueue-hold.js";
import type { WorkloadCache } from "../kueue/workload-cache.js";
import type { WorkloadView } from "../kueue/workload-view.js";
import { archivedLogCap, attemptToFollow } from "../log-archive/archive-pass.js";
import { type AttemptArchive, archiveStatus } from "../log-archive/archive-status.js";
import type { LogArchiver } from "../log-archive/log-archiver.js";
import type { RunRetention } from "../log-archive/run-retention.js";
import { keyOf, type PodView, parsePod, type StoredPlaybook, splitKey } from "../objects.js";
import type { ObservedPlacement } from "../pods/built-pod-difference.js";
import { type MountEvent, mountEventsDue } from "../pods/missing-source.js";
import { readMountEvents } from "../pods/mount-events.js";
import { admittedFlavors, observePlacement } from "../pods/observed-placement.js";
import { alternatePodName, podNameFor } from "../pods/pod-builder.js";
import { sortRunPods } from "../pods/pod-identity.js";
import type { PolicyGovernor } from "../policy/policy-governor.js";
import { slotState } from "../policy/policy-queue.js";
import { PodNameTakenError, PodRefusedError } from "../reconcile-errors.js";
import { isFinished } from "../status.js";
import type { ProgressLook } from "./live-progress.js";
import { passPods } from "./pass-pods.js";
import type { ProgressLooks } from "./progress-looks.js";
import { decide, decideRefusedPod } from "./reconcile.js";
import type { PlaybookWriter } from "./writer.js";

/** What the reconciler reads from the manager's caches. */
export interface PlaybookListers {
  /** The cached Playbook of this `namespace/name` key. */
  playbook(key: string): StoredPlaybook | undefined;
  /** The cached Playbooks of one namespace. */
  playbooksIn(namespace: string): StoredPlaybook[];
  /** The cached pod of this `namespace/name` key. */
  pod(key: string): PodView | undefined;
  /** The cached pods that name the Playbook of this UID as an owner (the owner index). */
  podsNaming(namespace: string, uid: string): PodView[];
  /** The cached pods of one namespace. */
  podsIn(namespace: string): PodView[];
}

export interface PlaybookReconcilerDeps {
  listers: PlaybookListers;
  writer: PlaybookWriter;
  /** For the reads a pass makes past the caches: a pod the cache may lag behind, a node's placement. */
  api: ApiClient;
  log: Logger;
  clock: Clock;
  /** The controller's settings; the manager updates them in place (the agent delivery chosen). */
  settings: ReconcileSettings;
  governor: Pick<PolicyGovernor, "capOf" | "rulesFor" | "withNamespaceLock">;
  /** Kueue's Workloads of the runs' pods, with --kueue. */
  workloads: Pick<WorkloadCache, "of"> | undefined;
  /** When each running run's progress was last read (--progress-interval). */
  progress: ProgressLooks;
  /** The log archive, when --log-archive-bucket turns it on (docs/log-archive.md). */
  archive?: LogArchiver | undefined;
  /** The log archive's finalizer and the deletion of a deleted run's objects (log-archive/run-retention.ts). */
  retention?: Pick<RunRetention, "pass">;
}

/** What one pass returns to the worker that ran it. */
export interface PassResult {
  /** When to look again, if time alone will change the answer. */
  requeueAfterMs?: number;
  /** The pass only waited for the cache to show this controller's last write. */
  waited?: true;
}

// When to look again at a Playbook whose cache has not shown this controller's last status write
// yet, should the watch event that normally brings it be lost.
const BEHIND_RETRY_MS = 5_000;

export class PlaybookReconciler {
  private readonly deps: PlaybookReconcilerDeps;
  private readonly listers: PlaybookListers;
  private readonly writer: PlaybookWriter;
  /**
   * Pods being deleted that hold the controller's finalizer and whose Playbook (by UID) is gone,
   * by pod key: the pass for the owner's name releases them, whether or not a Playbook of that
   * name exists again.
   */
  private readonly orphans = new Set<string>();

  constructor(deps: PlaybookReconcilerDeps) {
    this.deps = deps;
    this.listers = deps.listers;
    this.writer = deps.writer;
  }

  /**
   * A pod event: when the pod's Playbook is gone and the pod still holds the controller's
   * finalizer, it is kept for release and the key of the pass for its owner's name returned.
   */
  noteOrphan(pod: PodView, ownerCached: boolean): string | undefined {
    const owner = pod.metadata.ownerReferences?.find((ref) => ref.controller && ref.kind === KIND);
    if (!owner || !orphanToRelease(pod, ownerCached)) return undefined;
    this.orphans.add(keyOf(pod.metadata));
    return keyOf({ namespace: pod.metadata.namespace ?? "", name: owner.name });
  }

  /**
   * One pass for one key. Returns when to look again, if time alone will change the answer, and
   * whether the pass only waited for the cache to show this controller's last write.
   */
  async reconcile(key: string): Promise<PassResult> {
    const { namespace } = splitKey(key);
    const playbook = this.listers.playbook(key);
    // A deleted Playbook's pods, even when a new Playbook has taken its name.
    if (this.orphans.size > 0)
      await this.releaseOrphans(namespace, splitKey(key).name, playbook?.metadata.uid);
    if (!playbook) {
      this.deps.progress.forget(key);
      this.deps.archive?.forgetRun(key);
      return {};
    }
    // The watch event of this controller's own last write re-queues the key when it arrives.
    if (this.writer.isBehind(playbook)) return { requeueAfterMs: BEHIND_RETRY_MS, waited: true };
    // A deleted run's follows end (their uploads aborted) before its folder is emptied.
    if (playbook.metadata.deletionTimestamp) await this.deps.archive?.stopRun(key);
    // The archive's finalizer before the first pod; a deleted run's objects before it goes.
    const retained = await this.deps.retention?.pass(playbook);
    if (retained?.done)
      return retained.requeueAfterMs === undefined ? {} : { requeueAfterMs: retained.requeueAfterMs };
    const pods = await this.podsOf(playbook);
    const cap = this.deps.governor.capOf(namespace);
    // A run with pods but no start record waits too: its pods may all be foreign (pod-identity.ts),
    // and a pod of someone else's making does not let a run pass the queue.
    const waits = cap && !playbook.status?.startTime && !isFinished(playbook.status);
    if (!waits)
      return this.decideAndApply({
        playbook,
        pods,
        now: this.deps.clock.now(),
        settings: this.deps.settings,
      });
    // One start at a time per capped namespace, counted from the caches and this writer's own
    // creates: two workers never take the same slot, and a restarted controller counts the same.
    return this.deps.governor.withNamespaceLock(namespace, async () => {
      const current = this.listers.playbook(key) ?? playbook;
      const slots = slotState(
        key,
        this.listers.playbooksIn(namespace),
        this.podsIn(namespace),
        cap.cap,
        cap.where,
      );
      return this.decideAndApply({
        playbook: current,
        pods,
        now: this.deps.clock.now(),
        settings: this.deps.settings,
        slots,
      });
    });
  }

  /** Ends the log archive's follows (their uploads aborted: the next leader begins them again). */
  async stopArchive(): Promise<void> {
    await this.deps.archive?.stop();
  }

  /** The pods the cache shows controlled by the Playbook of this UID (never by its name). */
  ownedPods(namespace: string, uid: string | undefined): PodView[] {
    if (!uid) return [];
    return this.listers.podsNaming(namespace, uid).filter((pod) => isControlledBy(pod, uid));
  }

  /** The namespace's pods, with those created but not yet in the cache. */
  private podsIn(namespace: string): PodView[] {
    const cached = this.listers.podsIn(namespace);
    const seen = new Set(cached.map((p) => p.metadata.name));
    return [...cached, ...this.writer.createdPods(namespace).filter((p) => !seen.has(p.metadata.name))];
  }

  /**
   * The pods of a deleted Playbook that still carry the controller's finalizer, once the garbage
   * collector deletes them: nobody is left to read them, so the finalizer comes off. `liveUid`: the
   * Playbook of that name now, if any, whose own pods are not orphans.
   */
  private async releaseOrphans(namespace: string, name: string, liveUid: string | undefined): Promise<void> {
    for (const podKey of [...this.orphans]) {
      const pod = this.listers.pod(podKey);
      const owner = pod?.metadata.ownerReferences?.find((ref) => ref.controller && ref.kind === KIND);
      if (pod && (pod.metadata.namespace !== namespace || owner?.name !== name)) continue;
      // Kept until released: a failed release fails the pass, which is retried.
      if (pod && owner?.uid !== liveUid && orphanToRelease(pod, false))
        await this.writer.releasePod(namespace, pod.metadata.name);
      this.orphans.delete(podKey);
    }
  }

  /**
   * Where the run's pods were placed, read for a run whose status records no pod yet: a pod found
   * then is adopted only as what the controller builds, placed where the controller sees it was
   * (pods/observed-placement.ts). Nothing is read for a pod that carries no placement.
   */
  private async placementsBeforeRecord(
    input: ReconcileInput,
    workloads: readonly WorkloadView[] | undefined,
  ): Promise<Record<string, ObservedPlacement> | undefined> {
    const status = input.playbook.status ?? {};
    if (status.podUID !== undefined) return undefined;
    const { name, uid = "" } = input.playbook.metadata;
    // Only the pods named for an attempt are candidates (pod-identity.ts): no read for the others.
    const placed = sortRunPods(status, input.pods, { name, uid }).unrecorded.filter(
      (pod) =>
        pod.metadata.uid &&
        (pod.spec?.nodeName || pod.spec?.runtimeClassName || admittedFlavors(workloadOf(pod, workloads))),
    );
    if (placed.length === 0) return undefined;
    const signal = this.writer.leadingSignal;
    const seen = await Promise.all(
      placed.map((pod) => observePlacement(this.deps.api, pod, workloadOf(pod, workloads), { signal })),
    );
    return Object.fromEntries(placed.map((pod, i) => [pod.metadata.uid ?? "", seen[i] ?? {}]));
  }

  private async decideAndApply(input: ReconcileInput): Promise<{ requeueAfterMs?: number }> {
    const { playbook } = input;
    const start = this.writer.unrecordedStart(playbook.metadata.uid ?? "");
    const look = await this.lookAtProgress(input);
    const workloads = this.deps.workloads?.of(input.pods);
    const placements = start ? undefined : await this.placementsBeforeRecord(input, workloads);
    const mountEvents = await this.mountEventsOf(input);
    let withRules: ReconcileInput = {
      ...input,
      rules: this.deps.governor.rulesFor(playbook.metadata.namespace ?? ""),
      takenPodNames: this.takenPodNames(playbook),
      ...(workloads ? { workloads } : {}),
      ...(placements ? { placements } : {}),
      ...(start ? { unrecordedStart: start } : {}),
      ...(look ? { progress: look } : {}),
      ...(mountEvents ? { mountEvents } : {}),
    };
    const archived = this.followLog(withRules);
    for (;;) {
      const decision = withArchive(decide(withRules), archived, input);
      try {
        await this.writer.apply(playbook, decision);
      } catch (error) {
        if (error instanceof PodNameTakenError && !withRules.takenPodNames?.includes(error.podName)) {
          // Someone else's pod holds the name: decide again knowing it (the alternate name, or
          // a Pending run that says which pods hold both). At most twice: each name once.
          this.deps.log.info({ key: keyOf(playbook.metadata), err: error.message }, "Pod name taken");
          withRules = { ...withRules, takenPodNames: [...(withRules.takenPodNames ?? []), error.podName] };
          continue;
        }
        if (!(error instanceof PodRefusedError)) throw error;
        await this.writer.apply(playbook, decideRefusedPod(withRules, error.message));
        return {};
      }
      if (decision.status === null && !decision.actions.some((action) => action.type === "createPod")) {
        // The archive's result alone: written apart from the run's outcome, finished or not.
        const alone = archiveStatus(playbook.status ?? {}, archived, input.now, playbook.metadata.generation);
        if (alone) await this.writer.writeArchiveStatus(playbook, alone);
      }
      if (decision.trustedReport && decision.status)
        this.deps.archive?.keepReport(playbook, decision.status, decision.trustedReport);
      const taken = decision.progressTaken;
      if (taken) this.deps.progress.took(playbook, taken.podUID, taken);
      const requeueAfterMs = earliest(decision.requeueAfterMs, this.nextProgressLookInMs(input));
      return requeueAfterMs === undefined ? {} : { requeueAfterMs };
    }
  }

  /** Begins archiving the recorded attempt's log when it is due; what the archive knows of it. */
  private followLog(input: ReconcileInput): AttemptArchive | undefined {
    const archive = this.deps.archive;
    const podUID = input.playbook.status?.podUID;
    if (!archive || podUID === undefined) return undefined;
    const ref = attemptToFollow(input.playbook, input.pods, archivedLogCap(input.rules));
    if (ref) archive.follow(ref);
    const { namespace = "", name } = input.playbook.metadata;
    return archive.resultOf(podUID) ?? archive.earlierResultOf(`${namespace}/${name}`, input.playbook.status);
  }

  /**
   * The kubelet's FailedMount events of the run's pods that wait for their volumes
   * (pods/missing-source.ts), by pod UID; undefined when none waits. A read that fails leaves that
   * pod to its start timeout until the next pass.
   */
  private async mountEventsOf(input: ReconcileInput): Promise<Record<string, MountEvent[]> | undefined> {
    const waiting = input.pods.filter((pod) => pod.metadata.uid && mountEventsDue(pod));
    if (waiting.length === 0) return undefined;
    const signal = this.writer.leadingSignal;
    const read = await Promise.all(
      waiting.map((pod) =>
        readMountEvents(this.deps.api, pod, { signal }).catch((error: unknown) => {
          const { namespace, name } = pod.metadata;
          this.deps.log.debug(
            { namespace, pod: name, err: apiErrorMessage(error) },
            "Could not read pod events",
          );
          return [];
        }),
      ),
    );
    return Object.fromEntries(waiting.map((pod, i) => [pod.metadata.uid ?? "", read[i] ?? []]));
  }

  /**
   * Reads the runner log of the pod the run's status records when a look at its progress is due
   * (ProgressLooks); a read that fails leaves the status as it is until the next one.
   */
  private async lookAtProgress(input: ReconcileInput): Promise<ProgressLook | undefined> {
    try {
      return await this.deps.progress.look(input.playbook, input.pods, input.now, {
        signal: this.writer.leadingSignal,
      });
    } catch (error) {
      const { namespace, name } = input.playbook.metadata;
      this.deps.log.debug({ namespace, name, err: apiErrorMessage(error) }, "Could not read runner log");
      return undefined;
    }
  }

  /** How long until the run's next progress look, while its runner runs. */
  private nextProgressLookInMs(input: ReconcileInput): number | undefined {
    const due = this.deps.progress.dueAt(input.playbook, input.pods);
    return due === undefined ? undefined : Math.max(0, due - this.deps.clock.now().getTime());
  }

  /**
   * The names of the run's current and next attempt held by pods it does not control (a deleted
   * Playbook's of the same name, still terminating, or anyone's that carries the managed-by label).
   */
  private takenPodNames(playbook: StoredPlaybook): string[] {
    const namespace = playbook.metadata.namespace ?? "";
    const { name, uid = "" } = playbook.metadata;
    const attempts = playbook.status?.podAttempts ?? 0;
    const names = [Math.max(1, attempts), attempts + 1].flatMap((attempt) => [
      podNameFor(name, attempt),
      alternatePodName(name, attempt, uid),
    ]);
    return [...new Set(names)].filter((podName) => {
      const pod = this.listers.pod(keyOf({ namespace, name: podName }));
      return pod !== undefined && !isControlledBy(pod, uid);
    });
  }

  /** The pods a pass on the Playbook decides on (pass-pods.ts): the cache's, and what it may lag behind. */
  private podsOf(playbook: StoredPlaybook): Promise<PodView[]> {
    const uid = playbook.metadata.uid;
    const namespace = playbook.metadata.namespace ?? "";
    return passPods(playbook, this.writer.unrecordedStart(uid ?? ""), {
      cached: this.ownedPods(namespace, uid),
      created: uid ? this.writer.createdPodsOf(uid).filter((pod) => isControlledBy(pod, uid)) : [],
      readLive: async (name) => {
        try {
          const live = parsePod(
            await this.deps.api.readNamespacedPod({ name, namespace }, { signal: this.writer.leadingSignal }),
          );
          return live && isControlledBy(live, uid) ? live : undefined;
        } catch (error) {
          if (isNotFound(error)) return undefined;
          throw error;
        }
      },
    });
  }
}

/** The decision's status with the archive's result in it, when it writes one. */
function withArchive(
  decision: Decision,
  archived: AttemptArchive | undefined,
  input: ReconcileInput,
): Decision {
  if (!decision.status || !archived) return decision;
  const status = archiveStatus(decision.status, archived, input.now, input.playbook.metadata.generation);
  return status ? { ...decision, status } : decision;
}

function earliest(a: number | undefined, b: number | undefined): number | undefined {
  if (a === undefined) return b;
  return b === undefined ? a : Math.min(a, b);
}

function isControlledBy(pod: PodView, uid: string | undefined): boolean {
  return pod.metadata.ownerReferences?.some((ref) => ref.controller && ref.uid === uid) ?? false;
}
