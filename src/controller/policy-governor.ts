// The namespace policies as the controller sees them: a cache of PlaybookPolicies, the rules each
// namespace is governed by (its policy named default, else the controller's flags), one lock per
// namespace so that two workers never hand out the same slot of a running-Playbooks cap, and the
// policies' status (observedGeneration, Ready, governed), written while leading and not too often.
import type { Logger } from "pino";
import { z } from "zod";
import { setCondition } from "../api/conditions.js";
import { zodProblems } from "../api/manifest.js";
import { API_VERSION, GROUP, VERSION } from "../api/playbook.js";
import {
  type ClusterAllowances,
  clusterRules,
  GOVERNING_POLICY_NAME,
  type NamespaceRules,
  POLICY_KIND,
  POLICY_PLURAL,
  type PolicySpec,
  PolicySpecSchema,
  type PolicyStatus,
  PolicyStatusSchema,
  policyProblems,
  policyRules,
} from "../api/policy.js";
import type { ListPage } from "../runtime/api-client.js";
import { apiErrorMessage, isConflict, isNotFound } from "../runtime/api-errors.js";
import { Informer } from "../runtime/informer.js";
import type { KubeClients } from "../runtime/kube-config.js";
import type { ControllerMetrics } from "./metrics.js";
import { keyOf, MetaSchema, type StoredPlaybook } from "./objects.js";
import { isFinished } from "./status.js";

const StoredPolicySchema = z.looseObject({
  apiVersion: z.string(),
  kind: z.string(),
  metadata: MetaSchema,
  spec: z.unknown(),
  status: PolicyStatusSchema.optional(),
});
export type StoredPolicy = z.infer<typeof StoredPolicySchema>;

export function parseStoredPolicy(raw: unknown): StoredPolicy | null {
  const parsed = StoredPolicySchema.safeParse(raw);
  return parsed.success ? parsed.data : null;
}

type ReadPolicy = { ok: true; spec: PolicySpec } | { ok: false; problem: string };

function readPolicySpec(policy: StoredPolicy): ReadPolicy {
  const parsed = PolicySpecSchema.safeParse(policy.spec ?? {});
  if (parsed.success) return { ok: true, spec: parsed.data };
  const problems = zodProblems(parsed.error, policy.spec);
  return { ok: false, problem: problems.map((p) => `spec.${p.path}: ${p.message}`).join("; ") };
}

export const READY = "Ready";
/** A policy's status is written at most this often for a change of its governed count alone. */
export const POLICY_STATUS_INTERVAL_MS = 5_000;

export interface GovernorDeps {
  namespaces: readonly string[];
  clients: KubeClients;
  log: Logger;
  metrics: ControllerMetrics;
  cluster: ClusterAllowances;
  controllerMaxCeilingMs: number;
  watchTimeoutMs: number;
  resyncMs: number;
  /** One page of a namespace's policies ("" for all), from the continue token of the page before. */
  list: (namespace: string, continueToken: string | undefined) => Promise<ListPage>;
  /** The Playbooks of a namespace, from the controller's cache. */
  playbooksIn: (namespace: string) => StoredPlaybook[];
  /** A namespace's policy changed: its Playbooks not started yet are looked at again. */
  onPolicyChange: (namespace: string) => void;
  onProblemChange: () => void;
  onReconnect: (cause: "timeout" | "error" | "silent") => void;
  onRelist: () => void;
  now: () => Date;
}

export class PolicyGovernor {
  readonly informers = new Map<string, Informer<StoredPolicy>>();
  private readonly deps: GovernorDeps;
  private readonly locks = new Map<string, Promise<unknown>>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private readonly lastWrite = new Map<string, number>();
  private signal: AbortSignal | undefined;
  /** The rules last read from each namespace's policy, by its resourceVersion: parsed once per version. */
  private readonly read = new Map<string, { resourceVersion: string | undefined; rules: NamespaceRules }>();

  constructor(deps: GovernorDeps) {
    this.deps = deps;
    for (const namespace of deps.namespaces) this.informers.set(namespace, this.informer(namespace));
  }

  private informer(namespace: string): Informer<StoredPolicy> {
    const informer = new Informer<StoredPolicy>({
      resource: POLICY_PLURAL,
      api: this.deps.clients.api,
      watchPath: namespace
        ? `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${POLICY_PLURAL}`
        : `/apis/${GROUP}/${VERSION}/${POLICY_PLURAL}`,
      list: (continueToken) => this.deps.list(namespace, continueToken),
      parse: parseStoredPolicy,
      keyOf: (policy) => keyOf(policy.metadata),
      resourceVersionOf: (policy) => policy.metadata.resourceVersion,
      watchTimeoutMs: this.deps.watchTimeoutMs,
      resyncMs: this.deps.resyncMs,
      log: this.deps.log,
      onReconnect: this.deps.onReconnect,
      onRelist: this.deps.onRelist,
      onProblemChange: this.deps.onProblemChange,
    });
    const changed = (policy: StoredPolicy, old?: StoredPolicy) => {
      const namespace = policy.metadata.namespace ?? "";
      // A status write of ours changes nothing the Playbooks are decided on.
      if (!old || old.metadata.generation !== policy.metadata.generation) this.deps.onPolicyChange(namespace);
      this.scheduleStatus(namespace, 0);
    };
    informer.addHandlers({
      onUpsert: (policy, old) => changed(policy, old),
      onDelete: (policy) => this.deps.onPolicyChange(policy.metadata.namespace ?? ""),
    });
    return informer;
  }

  private informerFor(namespace: string): Informer<StoredPolicy> | undefined {
    return this.informers.get(namespace) ?? this.informers.get("");
  }

  private governing(namespace: string): StoredPolicy | undefined {
    return this.informerFor(namespace)?.get(`${namespace}/${GOVERNING_POLICY_NAME}`);
  }

  /** The rules of a namespace; a policy named default that cannot be read refuses every new run. */
  rulesFor(namespace: string): NamespaceRules {
    const policy = this.governing(namespace);
    if (!policy) return clusterRules(this.deps.cluster);
    const known = this.read.get(namespace);
    if (known && known.resourceVersion === policy.metadata.resourceVersion) return known.rules;
    const rules = this.readRules(policy);
    this.read.set(namespace, { resourceVersion: policy.metadata.resourceVersion, rules });
    return rules;
  }

  private readRules(policy: StoredPolicy): NamespaceRules {
    const read = readPolicySpec(policy);
    const meta = { name: policy.metadata.name, generation: policy.metadata.generation };
    if (!read.ok) {
      return {
        ...policyRules({ ...meta, spec: {} }, this.deps.cluster),
        problem: `PlaybookPolicy ${policy.metadata.name} cannot be read: ${read.problem}`,
      };
    }
    return policyRules({ ...meta, spec: read.spec }, this.deps.cluster);
  }

  /** The namespace's running-Playbooks cap, if its policy sets one. */
  capOf(namespace: string): { cap: number; where: string } | undefined {
    const rules = this.rulesFor(namespace);
    const cap = rules.maximums.runningPlaybooks;
    if (cap === undefined || !rules.policy) return undefined;
    return { cap, where: `PlaybookPolicy ${rules.policy.name}, spec.maximums.runningPlaybooks` };
  }

  /** Runs `work` after every earlier holder of the namespace's lock finished. */
  async withNamespaceLock<T>(namespace: string, work: () => Promise<T>): Promise<T> {
    const before = this.locks.get(namespace) ?? Promise.resolve();
    const mine = before.then(work, work);
    const tail = mine.catch(() => {});
    this.locks.set(namespace, tail);
    try {
      return await mine;
    } finally {
      if (this.locks.get(namespace) === tail) this.locks.delete(namespace);
    }
  }

  /** Starts writing policy status, as the leader; the signal aborts when leading ends. */
  startWriting(signal: AbortSignal): void {
    this.signal = signal;
    signal.addEventListener("abort", () => this.stop(), { once: true });
    for (const informer of this.informers.values()) {
      for (const policy of informer.list()) this.scheduleStatus(policy.metadata.namespace ?? "", 0);
    }
  }

  stop(): void {
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    this.signal = undefined;
  }

  /**
   * Looks at the namespace's policies' status after `delayMs`, or once POLICY_STATUS_INTERVAL_MS
   * passed since the last write: a burst of Playbook events makes one write.
   */
  scheduleStatus(namespace: string, delayMs = POLICY_STATUS_INTERVAL_MS): void {
    if (!this.signal || this.signal.aborted || this.timers.has(namespace)) return;
    const since = performance.now() - (this.lastWrite.get(namespace) ?? Number.NEGATIVE_INFINITY);
    const wait = Math.max(delayMs, POLICY_STATUS_INTERVAL_MS - since, 0);
    const timer = setTimeout(() => {
      this.timers.delete(namespace);
      this.writeStatuses(namespace).catch((error: unknown) => {
        this.deps.log.warn(
          { namespace, err: apiErrorMessage(error) },
          "Failed to update PlaybookPolicy status",
        );
        this.scheduleStatus(namespace);
      });
    }, wait);
    timer.unref();
    this.timers.set(namespace, timer);
  }

  /** The status a policy should show now. */
  desiredStatus(policy: StoredPolicy): PolicyStatus {
    const namespace = policy.metadata.namespace ?? "";
    const generation = policy.metadata.generation;
    const governs = policy.metadata.name === GOVERNING_POLICY_NAME;
    const governed = governs
      ? this.deps.playbooksIn(namespace).filter((p) => !isFinished(p.status)).length
      : 0;
    let ready: { status: "True" | "False"; reason: string; message: string };
    const read = readPolicySpec(policy);
    if (!governs) {
      ready = {
        status: "False",
        reason: "NotDefault",
        message: `only the PlaybookPolicy named ${GOVERNING_POLICY_NAME} governs namespace ${namespace}; this one governs nothing`,
      };
    } else if (!read.ok) {
      ready = { status: "False", reason: "InvalidPolicy", message: read.problem };
    } else {
      const problems = policyProblems(
        { name: policy.metadata.name, spec: read.spec },
        this.deps.controllerMaxCeilingMs,
      );
      ready =
        problems.length > 0
          ? {
              status: "False",
              reason: "InvalidPolicy",
              message: `Playbooks that take these defaults are refused: ${problems.join("; ")}`,
            }
          : {
              status: "True",
              reason: "Governing",
              message: `governs the Playbooks of namespace ${namespace}`,
            };
    }
    const previous = policy.status ?? {};
    const conditions = setCondition(
      previous.conditions ?? [],
      { type: READY, ...ready },
      this.deps.now(),
      generation,
    );
    return {
      ...previous,
      ...(generation !== undefined ? { observedGeneration: generation } : {}),
      governed,
      conditions,
    };
  }

  private async writeStatuses(namespace: string): Promise<void> {
    const informer = this.informerFor(namespace);
    if (!informer || !this.signal) return;
    for (const policy of informer.list()) {
      if ((policy.metadata.namespace ?? "") !== namespace) continue;
      const status = this.desiredStatus(policy);
      if (JSON.stringify(status) === JSON.stringify(policy.status ?? {})) continue;
      const { name, resourceVersion } = policy.metadata;
      try {
        await this.deps.clients.api.replaceNamespacedCustomObjectStatus(
          {
            group: GROUP,
            version: VERSION,
            plural: POLICY_PLURAL,
            namespace,
            name,
            body: {
              apiVersion: API_VERSION,
              kind: POLICY_KIND,
              metadata: { name, namespace, resourceVersion },
              spec: policy.spec,
              status,
            },
          },
          { signal: this.signal },
        );
        this.lastWrite.set(namespace, performance.now());
        this.deps.metrics.policyStatusWrites.inc();
        const ready = status.conditions?.find((c) => c.type === READY);
        this.deps.log.info(
          { namespace, name, ready: ready?.status, reason: ready?.reason, governed: status.governed },
          "Updated PlaybookPolicy status",
        );
      } catch (error) {
        // The cache brings the newer policy, and its event schedules the next look.
        if (isConflict(error) || isNotFound(error)) continue;
        throw error;
      }
    }
  }
}
