// The PlaybookPolicies' status (observedGeneration, Ready, governed): what each should show, a
// pure function of the policy and the Playbooks it governs, and its writing, while leading and
// not too often (a burst of Playbook events makes one write).
import type { Logger } from "pino";
import { setCondition } from "../../api/conditions.js";
import { API_VERSION, GROUP, VERSION } from "../../api/playbook.js";
import { GOVERNING_POLICY_NAME, POLICY_KIND, POLICY_PLURAL, type PolicyStatus } from "../../api/policy.js";
import { policyProblems } from "../../api/policy-consistency.js";
import { apiErrorMessage, isConflict, isNotFound } from "../../runtime/api-errors.js";
import type { KubeClients } from "../../runtime/kube-config.js";
import type { ControllerMetrics } from "../metrics.js";
import { readPolicySpec, type StoredPlaybook, type StoredPolicy } from "../objects.js";
import { isFinished } from "../status.js";

export const READY = "Ready";
/** A policy's status is written at most this often for a change of its governed count alone. */
export const POLICY_STATUS_INTERVAL_MS = 5_000;

/** What the status of a policy is decided from, besides the policy. */
export interface PolicyStatusFacts {
  /** The Playbooks of a namespace, from the controller's cache. */
  playbooksIn: (namespace: string) => StoredPlaybook[];
  /** The controller's maximum ceiling: a policy default above it refuses the Playbooks that take it. */
  controllerMaxCeilingMs: number;
  /** The controller's maximum killGrace: a policy default above it refuses the Playbooks that take it. */
  controllerMaxKillGraceMs?: number | undefined;
  /** The controller's maximum finallyCeiling: a policy default above it refuses the Playbooks that take it. */
  controllerMaxFinallyCeilingMs?: number | undefined;
  now: Date;
}

/** The status a policy should show now. */
export function desiredPolicyStatus(policy: StoredPolicy, facts: PolicyStatusFacts): PolicyStatus {
  const namespace = policy.metadata.namespace ?? "";
  const generation = policy.metadata.generation;
  const governs = policy.metadata.name === GOVERNING_POLICY_NAME;
  const governed = governs ? facts.playbooksIn(namespace).filter((p) => !isFinished(p.status)).length : 0;
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
      facts.controllerMaxCeilingMs,
      facts.controllerMaxKillGraceMs,
      facts.controllerMaxFinallyCeilingMs,
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
    facts.now,
    generation,
  );
  return {
    ...previous,
    ...(generation !== undefined ? { observedGeneration: generation } : {}),
    governed,
    conditions,
  };
}

export interface PolicyStatusWriterDeps {
  clients: KubeClients;
  log: Logger;
  metrics: ControllerMetrics;
  /** The cached policies that hold a namespace's (all namespaces' when one cache watches all); none when no cache does. */
  policiesIn: (namespace: string) => StoredPolicy[] | undefined;
  /** Every cached policy. */
  allPolicies: () => StoredPolicy[];
  /** The status a policy should show now. */
  statusOf: (policy: StoredPolicy) => PolicyStatus;
}

export class PolicyStatusWriter {
  private readonly deps: PolicyStatusWriterDeps;
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private readonly lastWrite = new Map<string, number>();
  private signal: AbortSignal | undefined;

  constructor(deps: PolicyStatusWriterDeps) {
    this.deps = deps;
  }

  /** Starts writing policy status, as the leader; the signal aborts when leading ends. */
  startWriting(signal: AbortSignal): void {
    this.signal = signal;
    signal.addEventListener("abort", () => this.stop(), { once: true });
    for (const policy of this.deps.allPolicies()) this.scheduleStatus(policy.metadata.namespace ?? "", 0);
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

  private async writeStatuses(namespace: string): Promise<void> {
    const policies = this.deps.policiesIn(namespace);
    if (!policies || !this.signal) return;
    for (const policy of policies) {
      if ((policy.metadata.namespace ?? "") !== namespace) continue;
      const status = this.deps.statusOf(policy);
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
