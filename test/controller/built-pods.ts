// The pod a controller builds for a run's next attempt, from its own decision: what the foreign-pod
// tests copy and change one field of (a pod built like the controller's), and what a controller
// stopped between its create and its record left behind (its own pod).
import type { NamespaceRules } from "../../src/api/policy.js";
import { limitDefaults } from "../../src/controller/config.js";
import type { ReconcileSettings } from "../../src/controller/decision.js";
import { parseStoredPlaybook } from "../../src/controller/objects.js";
import { decide } from "../../src/controller/playbook/reconcile.js";
import type { AgentDelivery } from "../../src/controller/pods/agent-delivery.js";
import type { PodManifest } from "../../src/controller/pods/pod-builder.js";
import { getPlaybook, type RunningController, testControllerConfig } from "./support.js";

/**
 * The pod the controller's own decision creates for the run now (as a pass that found its slot
 * free would), from the controller's settings and the namespace's rules.
 */
export async function podTheControllerBuilds(
  ns: string,
  name: string,
  settings: ReconcileSettings,
  rules?: NamespaceRules,
): Promise<PodManifest> {
  const stored = parseStoredPlaybook(await getPlaybook(ns, name));
  if (!stored) throw new Error(`Playbook ${ns}/${name} could not be read`);
  const decision = decide({
    playbook: stored,
    pods: [],
    now: new Date(),
    settings,
    ...(rules ? { rules } : {}),
  });
  const create = decision.actions.find((a) => a.type === "createPod");
  if (create?.type !== "createPod") throw new Error(`no pod to create: ${JSON.stringify(decision)}`);
  return create.pod;
}

/** What a running controller decides with: its settings and its governor's rules. */
export function controllerInputs(running: RunningController, ns: string) {
  const inner = running.controller as unknown as {
    settings: ReconcileSettings;
    governor: { rulesFor(namespace: string): NamespaceRules };
  };
  return { settings: inner.settings, rules: inner.governor.rulesFor(ns) };
}

/** The settings a controller started by startController([ns], overrides) decides with. */
export function startedControllerSettings(
  namespaces: string[],
  agentDelivery: AgentDelivery,
  overrides: Record<string, string | boolean> = {},
): ReconcileSettings {
  const config = testControllerConfig(namespaces, { ...overrides, agentDelivery });
  return {
    defaults: limitDefaults(config),
    runnerImage: config.runnerImage,
    ttlSecondsAfterFinished: config.ttlSecondsAfterFinished,
    allowedServiceAccounts: config.allowedServiceAccounts,
    allowedImages: config.allowedImages,
    agentDelivery,
  };
}
