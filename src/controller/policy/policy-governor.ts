// The namespace policies as the controller sees them: a cache of PlaybookPolicies, the rules each
// namespace is governed by (its policy named default, else the controller's flags), and one lock
// per namespace so that two workers never hand out the same slot of a running-Playbooks cap. The
// policies' status is policy-status.ts's, which the governor drives from its cache.
import type { Logger } from "pino";
import { GROUP, VERSION } from "../../api/playbook.js";
import {
  type ClusterAllowances,
  clusterRules,
  GOVERNING_POLICY_NAME,
  type NamespaceRules,
  POLICY_PLURAL,
  policyRules,
} from "../../api/policy.js";
import type { ListPage } from "../../runtime/api-client.js";
import { Informer } from "../../runtime/informer.js";
import type { KubeClients } from "../../runtime/kube-config.js";
import type { ControllerMetrics } from "../metrics.js";
import {
  keyOf,
  parseStoredPolicy,
  readPolicySpec,
  type StoredPlaybook,
  type StoredPolicy,
} from "../objects.js";
import { desiredPolicyStatus, POLICY_STATUS_INTERVAL_MS, PolicyStatusWriter } from "./policy-status.js";

export interface GovernorDeps {
  namespaces: readonly string[];
  clients: KubeClients;
  log: Logger;
  metrics: ControllerMetrics;
  cluster: ClusterAllowances;
  controllerMaxCeilingMs: number;
  controllerMaxKillGraceMs?: number | undefined;
  controllerMaxFinallyCeilingMs?: number | undefined;
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
  private readonly status: PolicyStatusWriter;
  /** The rules last read from each namespace's policy, by its resourceVersion: parsed once per version. */
  private readonly read = new Map<string, { resourceVersion: string | undefined; rules: NamespaceRules }>();

  constructor(deps: GovernorDeps) {
    this.deps = deps;
    for (const namespace of deps.namespaces) this.informers.set(namespace, this.informer(namespace));
    this.status = new PolicyStatusWriter({
      clients: deps.clients,
      log: deps.log,
      metrics: deps.metrics,
      policiesIn: (namespace) => this.informerFor(namespace)?.list(),
      allPolicies: () => [...this.informers.values()].flatMap((informer) => informer.list()),
      statusOf: (policy) =>
        desiredPolicyStatus(policy, {
          playbooksIn: deps.playbooksIn,
          controllerMaxCeilingMs: deps.controllerMaxCeilingMs,
          controllerMaxKillGraceMs: deps.controllerMaxKillGraceMs,
          controllerMaxFinallyCeilingMs: deps.controllerMaxFinallyCeilingMs,
          now: deps.now(),
        }),
    });
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
    this.status.startWriting(signal);
  }

  stop(): void {
    this.status.stop();
  }

  /** Looks at the namespace's policies' status after `delayMs`, or once the write interval passed. */
  scheduleStatus(namespace: string, delayMs = POLICY_STATUS_INTERVAL_MS): void {
    this.status.scheduleStatus(namespace, delayMs);
  }
}
