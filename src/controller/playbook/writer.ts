// The writer: applies a reconcile decision — pods first, then one status write, then events and
// metrics — and keeps what it just wrote in its expectations (expectations.ts) until the caches
// show it, so the next pass neither reads a pod as missing nor writes over a stale status.
import type { Logger } from "pino";
import { z } from "zod";
import { parseDuration } from "../../api/duration.js";
import { API_VERSION, GROUP, KIND, PLURAL, type PlaybookStatus, VERSION } from "../../api/playbook.js";
import { apiErrorMessage, isConflict, isNotFound, statusCodeOf } from "../../runtime/api-errors.js";
import type { Clock } from "../../runtime/clock.js";
import { EventRecorder, type EventTarget, eventApiOf } from "../../runtime/events.js";
import type { KubeClients } from "../../runtime/kube-config.js";
import type { Action, Decision, StartRecord } from "../decision.js";
import { PREEMPTION_FINALIZER } from "../kueue/kueue-names.js";
import { ceilingStartMs } from "../kueue/queued-time.js";
import type { LogUploadSecrets } from "../log-archive/upload-secret.js";
import type { ControllerMetrics } from "../metrics.js";
import { type PodView, parsePod, type StoredPlaybook } from "../objects.js";
import { builtPodDifference, type ObservedPlacement } from "../pods/built-pod-difference.js";
import type { PodManifest } from "../pods/pod-builder.js";
import { CREATE_SKEW_MS } from "../pods/pod-identity.js";
import { podServiceAccountToken, withoutServiceAccountToken } from "../pods/service-account-token.js";
import { PodCreateFailedError, PodNameTakenError, PodRefusedError } from "../reconcile-errors.js";
import { createFailedStatus, sameStatus } from "../status.js";
import { WriteExpectations } from "./expectations.js";

export interface WriterDeps {
  clients: KubeClients;
  log: Logger;
  clock: Clock;
  metrics: ControllerMetrics;
  identity: string;
  /** The Playbook label whose value becomes the metrics' playbook label; "" for none. */
  metricsPlaybookLabel: string;
  /** Where a pod found at a create was placed, as the API server shows it (pods/observed-placement.ts). */
  observePlacement?: (pod: PodView, signal: AbortSignal) => Promise<ObservedPlacement>;
  /** Makes the Secret of a runner that uploads its own log, before its pod (log-archive/upload-secret.ts). */
  logUpload?: Pick<LogUploadSecrets, "prepare">;
}

const SAID_ONCE_MAX = 10_000;

const WrittenSchema = z.looseObject({ metadata: z.looseObject({ resourceVersion: z.string() }) });

/** The task names of a Playbook's spec, for the series its start creates at 0; the spec is checked elsewhere. */
const SpecTaskNames = z.looseObject({
  tasks: z.array(z.looseObject({ name: z.string() })).optional(),
  finally: z.array(z.looseObject({ name: z.string() })).optional(),
});

function taskNamesOf(spec: unknown): string[] {
  const read = SpecTaskNames.safeParse(spec);
  if (!read.success) return [];
  return [...(read.data.tasks ?? []), ...(read.data.finally ?? [])].map((task) => task.name);
}

/** What the controller reads of a ServiceAccount. */
const ServiceAccountAutomount = z.looseObject({ automountServiceAccountToken: z.boolean().nullish() });

export class PlaybookWriter {
  readonly events: EventRecorder;
  private readonly deps: WriterDeps;
  /** Aborted when this replica stops leading: its writes in flight end at once. */
  private readonly leading = new AbortController();
  /** What this writer just wrote, until the caches show it. */
  private readonly expectations = new WriteExpectations();
  /** The keys of events said once (RecordedEvent.once): a foreign pod is named once, not every pass. */
  private readonly saidOnce = new Set<string>();

  constructor(deps: WriterDeps) {
    this.deps = deps;
    this.events = new EventRecorder(eventApiOf(deps.clients.api), deps.identity, deps.log, {
      signal: this.leading.signal,
      onDropped: () => deps.metrics.eventsDropped.inc(),
    });
  }

  /** Ends every write in flight and refuses new ones: another replica may lead now. */
  stopWriting(): void {
    this.leading.abort();
  }

  /** Aborts once this replica stopped leading, for the reads a pass makes too. */
  get leadingSignal(): AbortSignal {
    return this.leading.signal;
  }

  /** A pod this writer created that the cache does not show yet, if it is still trusted. */
  createdPod(namespace: string, name: string, ownerUid: string | undefined): PodView | undefined {
    return this.expectations.createdPod(namespace, name, ownerUid);
  }

  /** The pods this writer created in a namespace that the cache may not show yet. */
  createdPods(namespace: string): PodView[] {
    return this.expectations.createdPods(namespace);
  }

  /** The pods this writer created for the Playbook of that UID that the cache may not show yet. */
  createdPodsOf(ownerUid: string): PodView[] {
    return this.expectations.createdPodsOf(ownerUid);
  }

  /** The cache showed the pod: the memory of its create is no longer needed. */
  sawPod(pod: PodView): void {
    this.expectations.sawPod(pod);
  }

  /**
   * True while the cache still holds the Playbook as it was before this writer's last status
   * write: a pass on it would decide on old facts and its write would conflict.
   */
  isBehind(playbook: StoredPlaybook): boolean {
    return this.expectations.isBehind(playbook);
  }

  /** The start record of the first pod this writer created for a Playbook, while no status holds it. */
  unrecordedStart(playbookUid: string): StartRecord | undefined {
    return this.expectations.unrecordedStart(playbookUid);
  }

  async apply(playbook: StoredPlaybook, decision: Decision): Promise<void> {
    const target = this.targetOf(playbook);
    const created = new Map<string, string>();
    try {
      for (const action of decision.actions) {
        const uid = await this.applyAction(action, target);
        if (uid !== undefined && action.type === "createPod") created.set(action.pod.metadata.name, uid);
      }
    } catch (error) {
      const shown = decision.status ?? decision.pending;
      if (!(error instanceof PodCreateFailedError) || !shown) throw error;
      // Say why where the user looks, without counting the attempt: no pod was made.
      const now = this.deps.clock.now();
      this.events.post(target, { type: "Warning", reason: "FailedCreate", message: error.message }, now);
      const previous = playbook.status ?? {};
      const next = createFailedStatus(previous, shown, error.message, now);
      if (!sameStatus(previous, next)) await this.writeStatus(playbook, next);
      throw new PodCreateFailedError(error.message, ceilingLeftMs(next, now));
    }
    const label = this.deps.metricsPlaybookLabel;
    const labels = {
      namespace: target.namespace,
      ...(label ? { playbook: playbook.metadata.labels?.[label] ?? "" } : {}),
      tasks: taskNamesOf(playbook.spec),
    };
    // The UID of a pod created now goes on record with the status that names it; a first pod's
    // start record, when no status is written now, with the next one.
    const createdUid = decision.status?.podName ? created.get(decision.status.podName) : undefined;
    const status = createdUid ? { ...decision.status, podUID: createdUid } : decision.status;
    const pending = decision.pending;
    const pendingUid = pending?.podName ? created.get(pending.podName) : undefined;
    if (!status && pending && pendingUid && playbook.metadata.uid) {
      const { startTime, podName, podAttempts, planDigest } = pending;
      if (startTime && podName && podAttempts && planDigest)
        this.expectations.createdUnrecorded(playbook.metadata.uid, {
          startTime,
          podName,
          podUID: pendingUid,
          podAttempts,
          planDigest,
          ...(pending.limits ? { limits: pending.limits } : {}),
        });
    }
    if (status) {
      await this.writeStatus(playbook, status);
      if (decision.preempted) this.deps.metrics.recordPreempted(target.namespace, decision.preempted.reason);
      if (decision.admitted) {
        const { queue, waitSeconds } = decision.admitted;
        this.deps.metrics.recordAdmitted(target.namespace, queue, waitSeconds);
      }
      if (decision.finished) this.deps.metrics.recordFinished(decision.finished, labels);
      else this.deps.metrics.recordStarted(labels);
    } else if (decision.actions.some((action) => action.type === "createPod")) {
      this.deps.metrics.recordStarted(labels);
    }
    const now = this.deps.clock.now();
    for (const event of decision.events) {
      if (event.once !== undefined) {
        if (this.saidOnce.has(event.once)) continue;
        if (this.saidOnce.size >= SAID_ONCE_MAX) this.saidOnce.clear();
        this.saidOnce.add(event.once);
      }
      const { once: _once, ...posted } = event;
      this.events.post(target, posted, now);
    }
  }

  private targetOf(playbook: StoredPlaybook): EventTarget {
    return {
      namespace: playbook.metadata.namespace ?? "",
      name: playbook.metadata.name,
      uid: playbook.metadata.uid,
      resourceVersion: playbook.metadata.resourceVersion,
    };
  }

  /** The log archive's condition and status.log alone (log-archive/archive-status.ts). */
  writeArchiveStatus(playbook: StoredPlaybook, status: PlaybookStatus): Promise<void> {
    return this.writeStatus(playbook, status);
  }

  private async writeStatus(playbook: StoredPlaybook, status: PlaybookStatus): Promise<void> {
    const { namespace = "", name, resourceVersion } = playbook.metadata;
    const body = {
      apiVersion: API_VERSION,
      kind: KIND,
      metadata: { name, namespace, resourceVersion },
      spec: playbook.spec,
      status,
    };
    const written = await this.deps.clients.api.replaceNamespacedCustomObjectStatus(
      { group: GROUP, version: VERSION, plural: PLURAL, namespace, name, body },
      { signal: this.leading.signal },
    );
    this.deps.metrics.statusWrites.inc();
    if (status.startTime !== undefined && playbook.metadata.uid)
      this.expectations.recorded(playbook.metadata.uid);
    if (resourceVersion && WrittenSchema.safeParse(written).success)
      this.expectations.wroteStatus(playbook, resourceVersion);
    const condition = status.conditions?.find((c) => c.type === "Succeeded");
    this.deps.log.info(
      { namespace, name, phase: status.phase, reason: condition?.reason },
      "Updated Playbook status",
    );
  }

  /** Applies one action; a create resolves with the UID of the run's pod. */
  private async applyAction(action: Action, target: EventTarget): Promise<string | undefined> {
    switch (action.type) {
      case "createPod":
        return this.createPod(action, target);
      case "deletePod":
        return this.deletePod(action, target);
      case "releasePod":
        await this.releasePod(target.namespace, action.name);
        return undefined;
      default:
        await this.lowerDeadline(action, target);
        return undefined;
    }
  }

  /** The kubelet honours a lowered activeDeadlineSeconds on a running pod and keeps the pod. */
  private async lowerDeadline(
    action: { name: string; activeDeadlineSeconds: number },
    target: EventTarget,
  ): Promise<void> {
    try {
      await this.deps.clients.api.patchNamespacedPod(
        {
          name: action.name,
          namespace: target.namespace,
          body: [{ op: "replace", path: "/spec/activeDeadlineSeconds", value: action.activeDeadlineSeconds }],
        },
        { signal: this.leading.signal },
      );
      this.deps.log.info(
        {
          namespace: target.namespace,
          name: target.name,
          pod: action.name,
          activeDeadlineSeconds: action.activeDeadlineSeconds,
        },
        "Lowered Pod deadline",
      );
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }

  private async createPod(
    action: Action & { type: "createPod" },
    target: EventTarget,
  ): Promise<string | undefined> {
    const ref = { namespace: target.namespace, name: target.name };
    const { api } = this.deps.clients;
    const podName = action.pod.metadata.name;
    const body = await this.respectTokenAutomount(action.pod, ref.namespace);
    if (action.logUpload) {
      const secrets = this.deps.logUpload;
      if (!secrets)
        throw new Error(`pod ${podName} uploads its log, and this controller makes no upload Secret`);
      try {
        await secrets.prepare(action.pod, action.attempt, action.logUpload, this.leading.signal);
      } catch (error) {
        const code = statusCodeOf(error);
        if (code === undefined || code === 401 || code === 429 || code >= 500) throw error;
        throw new PodCreateFailedError(
          `could not create the log upload Secret of pod ${podName}: ${apiErrorMessage(error)}`,
          undefined,
        );
      }
    }
    try {
      const created = parsePod(
        await api.createNamespacedPod({ namespace: ref.namespace, body }, { signal: this.leading.signal }),
      );
      if (created) this.expectations.createdNow(created, action.pod.metadata.ownerReferences[0]?.uid ?? "");
      const uid = created?.metadata.uid;
      this.deps.log.info({ ...ref, pod: podName, attempt: action.attempt }, "Created Pod");
      return uid;
    } catch (error) {
      // Its deterministic name makes a second create of the same attempt fail here, never run
      // twice; the pod of that name is this run's only if this Playbook (its UID) controls it.
      // Compared with the pod as it was sent (its token as the service account allows).
      if (isConflict(error)) return this.adoptExisting({ ...action, pod: body }, target);
      const code = statusCodeOf(error);
      // The controller's own credentials refused, or the API server shedding load: nothing about
      // the pod or the namespace, so no refusal is shown on the run; the key is retried.
      if (code === 401 || code === 429) throw error;
      const message = `could not create pod ${podName}: ${apiErrorMessage(error)}`;
      if (code === 422) {
        // An invalid pod stays invalid: the run ends.
        this.events.post(target, { type: "Warning", reason: "FailedCreate", message }, this.deps.clock.now());
        throw new PodRefusedError(message);
      }
      // Refused by admission (Pod Security, quota, a missing service account): these may be
      // fixed while the run waits, so it is retried. Other failures (5xx, timeouts) say nothing
      // about the pod and are retried as they are.
      if (code !== undefined && code >= 400 && code < 500) throw new PodCreateFailedError(message, undefined);
      throw error;
    }
  }

  /**
   * The pod as it is created: without the token in its task containers when its service account
   * says automountServiceAccountToken: false (the pod's own projected volume would bypass what
   * the API server's admission respects). Read only for a pod that mounts a token. An account
   * that does not exist is left to admission, which refuses the pod naming it.
   */
  private async respectTokenAutomount(pod: PodManifest, namespace: string): Promise<PodManifest> {
    const account = podServiceAccountToken(pod);
    if (account === undefined) return pod;
    let read: unknown;
    try {
      read = await this.deps.clients.api.readNamespacedServiceAccount(
        { name: account, namespace },
        { signal: this.leading.signal },
      );
    } catch (error) {
      if (isNotFound(error)) return pod;
      const code = statusCodeOf(error);
      if (code !== undefined && code >= 400 && code < 500 && code !== 429)
        throw new PodCreateFailedError(
          `could not create pod ${pod.metadata.name}: could not read service account ${account} to learn whether it allows its token to be mounted: ${apiErrorMessage(error)}`,
          undefined,
        );
      throw error;
    }
    const automount = ServiceAccountAutomount.safeParse(read).data?.automountServiceAccountToken;
    return automount === false ? withoutServiceAccountToken(pod) : pod;
  }

  /**
   * A create found the name taken: the pod is ours (a repeated create: its controller reference
   * and the whole pod as this create built it) or someone else's.
   */
  private async adoptExisting(
    action: Action & { type: "createPod" },
    target: EventTarget,
  ): Promise<string | undefined> {
    const podName = action.pod.metadata.name;
    const uid = action.pod.metadata.ownerReferences[0]?.uid ?? "";
    let existing: PodView | null;
    try {
      existing = parsePod(
        await this.deps.clients.api.readNamespacedPod(
          { name: podName, namespace: target.namespace },
          { signal: this.leading.signal },
        ),
      );
    } catch (error) {
      // Gone since the create: the key is retried and creates it then.
      if (isNotFound(error)) throw new Error(`pod ${podName} existed at create and was gone at read`);
      throw error;
    }
    const owner = existing?.metadata.ownerReferences?.find((ref) => ref.controller);
    const unbuilt = existing ? await this.unbuilt(existing, action) : undefined;
    if (existing && owner?.kind === KIND && owner.uid === uid && unbuilt === undefined) {
      this.expectations.createdNow(existing, uid);
      this.deps.log.debug(
        { namespace: target.namespace, name: target.name, pod: podName },
        "Pod already existed",
      );
      return existing.metadata.uid;
    }
    const holder =
      owner?.kind === KIND && owner.uid === uid
        ? `it names this Playbook its controller, but the controller did not create it: ${unbuilt}`
        : owner
          ? `its controller is ${owner.kind} ${owner.name} (uid ${owner.uid})`
          : "it has no controller owner";
    throw new PodNameTakenError(podName, holder);
  }

  /** What makes an existing pod other than this create built it; undefined when it is the same. */
  private async unbuilt(
    existing: PodView,
    action: Action & { type: "createPod" },
  ): Promise<string | undefined> {
    const created = Date.parse(existing.metadata.creationTimestamp ?? "");
    const since = Number.isNaN(created) ? 0 : Math.max(0, this.deps.clock.now().getTime() - created);
    const observed = (await this.deps.observePlacement?.(existing, this.leading.signal)) ?? {};
    return builtPodDifference(existing, action.pod, since + CREATE_SKEW_MS, observed);
  }

  /**
   * Sets a Playbook's finalizers to its list with `finalizer` added or taken off (log-archive/
   * run-retention.ts): a merge patch that names the resourceVersion read, so a list another
   * writer changed since is refused (409) and the pass retried, never overwritten. A Playbook
   * gone already is fine.
   */
  async patchPlaybookFinalizer(playbook: StoredPlaybook, finalizer: string, present: boolean): Promise<void> {
    const { namespace = "", name, resourceVersion } = playbook.metadata;
    const others = (playbook.metadata.finalizers ?? []).filter((f) => f !== finalizer);
    try {
      await this.deps.clients.api.call({
        method: "PATCH",
        path: `/apis/${GROUP}/${VERSION}/namespaces/${encodeURIComponent(namespace)}/${PLURAL}/${encodeURIComponent(name)}`,
        body: { metadata: { resourceVersion, finalizers: present ? [...others, finalizer] : others } },
        contentType: "application/merge-patch+json",
        options: { signal: this.leading.signal },
      });
      this.deps.log.info({ namespace, name, finalizer }, present ? "Added finalizer" : "Removed finalizer");
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }

  /** Takes the controller's finalizer off a pod it is done with (kueue/kueue-finalizer.ts); a pod gone already is fine. */
  async releasePod(namespace: string, name: string): Promise<void> {
    try {
      await this.deps.clients.api.removePodFinalizer(
        { name, namespace, finalizer: PREEMPTION_FINALIZER },
        { signal: this.leading.signal },
      );
      this.deps.log.info({ namespace, pod: name }, "Released Pod");
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }

  private async deletePod(action: Action & { type: "deletePod" }, target: EventTarget): Promise<undefined> {
    const ref = { namespace: target.namespace, name: target.name };
    try {
      await this.deps.clients.api.deleteNamespacedPod(
        {
          name: action.name,
          namespace: ref.namespace,
          ...(action.gracePeriodSeconds !== undefined
            ? { gracePeriodSeconds: action.gracePeriodSeconds }
            : {}),
          propagationPolicy: "Background",
        },
        { signal: this.leading.signal },
      );
      this.deps.log.info({ ...ref, pod: action.name, why: action.why }, "Deleted Pod");
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }
}

/** How long until the run's ceiling passes, counted from its start, when the status says both. */
function ceilingLeftMs(status: PlaybookStatus, now: Date): number | undefined {
  const ceiling = status.limits?.ceiling?.value;
  // Moved on by the time its earlier pods waited in Kueue's queue, which is not the ceiling's.
  const start = ceilingStartMs(status.startTime ?? "", status);
  if (!ceiling || Number.isNaN(start)) return undefined;
  return Math.max(0, start + parseDuration(ceiling) - now.getTime());
}
