// `playbook describe NAME`: reads the Playbook and its namespace's PlaybookPolicy default (a policy
// that is missing or that RBAC hides is said, not an error) and prints describe-playbook.ts's lines.

import { z } from "zod";
import { builtInControllerDefaults } from "../../api/controller-limits.js";
import { GROUP, PlaybookSpecSchema, PlaybookStatusSchema, VERSION } from "../../api/playbook.js";
import {
  GOVERNING_POLICY_NAME,
  PlaybookPolicySchema,
  POLICY_PLURAL,
  policyRulesOf,
} from "../../api/policy.js";
import { ApiError } from "../../runtime/api-client.js";
import { describePlaybook, type PolicyRead } from "../describe-playbook.js";
import type { RunPodRead } from "../describe-pod-users.js";
import { EXIT } from "../exit-codes.js";
import { type Cluster, ClusterError, connect, describeApiFailure } from "./connection.js";
import { DescribeFlags, parseFlags } from "./flags.js";
import { getPlaybook, RESOURCE } from "./playbooks.js";

async function readPolicy(cluster: Cluster): Promise<PolicyRead> {
  const path = `/apis/${GROUP}/${VERSION}/namespaces/${encodeURIComponent(cluster.namespace)}/${POLICY_PLURAL}/${GOVERNING_POLICY_NAME}`;
  let raw: unknown;
  try {
    raw = await cluster.api.call({ method: "GET", path });
  } catch (error) {
    if (error instanceof ApiError && error.code === 404) return { kind: "none" };
    if (error instanceof ApiError && error.code === 403) {
      return {
        kind: "unreadable",
        why: `get ${POLICY_PLURAL}.${GROUP} ${GOVERNING_POLICY_NAME} forbidden by RBAC`,
      };
    }
    throw describeApiFailure(
      error,
      { verb: "get", resource: POLICY_PLURAL, name: GOVERNING_POLICY_NAME, kind: "PlaybookPolicy" },
      cluster,
    );
  }
  const parsed = PlaybookPolicySchema.safeParse(raw);
  if (!parsed.success) return { kind: "unreadable", why: "the API server's answer is not a PlaybookPolicy" };
  return { kind: "found", rules: policyRulesOf(parsed.data) };
}

const RunPodSchema = z.looseObject({ spec: z.looseObject({ hostUsers: z.boolean().optional() }).optional() });

/** The run's pod, for whether it has its own user namespace; a pod gone or hidden is said. */
async function readRunPod(cluster: Cluster, name: string | undefined): Promise<RunPodRead> {
  if (!name) return { kind: "none" };
  const path = `/api/v1/namespaces/${encodeURIComponent(cluster.namespace)}/pods/${encodeURIComponent(name)}`;
  try {
    const pod = RunPodSchema.safeParse(await cluster.api.call({ method: "GET", path }));
    if (!pod.success) return { kind: "unreadable", name, why: "the API server's answer is not a Pod" };
    return { kind: "found", name, hostUsers: pod.data.spec?.hostUsers };
  } catch (error) {
    if (error instanceof ApiError && error.code === 404) return { kind: "none" };
    if (error instanceof ApiError && error.code === 403) {
      return { kind: "unreadable", name, why: "get pods forbidden by RBAC" };
    }
    return { kind: "unreadable", name, why: error instanceof Error ? error.message : String(error) };
  }
}

export async function showDescription(rawFlags: unknown): Promise<number> {
  const flags = parseFlags(DescribeFlags, rawFlags);
  const cluster = connect(flags);
  const playbook = await getPlaybook(cluster, flags.name);
  const spec = PlaybookSpecSchema.safeParse(playbook.spec);
  if (!spec.success) {
    throw new ClusterError(
      `${RESOURCE} ${flags.name} in namespace ${cluster.namespace}: its spec is not one this version reads (${spec.error.issues[0]?.message ?? "invalid"})`,
      EXIT.invalid,
    );
  }
  const status = PlaybookStatusSchema.safeParse(playbook.status ?? {});
  const policy = await readPolicy(cluster);
  const described = playbook.status && status.success ? status.data : undefined;
  const pod = await readRunPod(cluster, described?.podName);
  // The controller's built-in defaults: its flags (not readable from here) may set others.
  const controllerDefaults = builtInControllerDefaults();
  const lines = describePlaybook(
    {
      name: playbook.metadata.name,
      namespace: cluster.namespace,
      spec: spec.data,
      status: described,
      pod,
    },
    policy,
    controllerDefaults,
  );
  process.stdout.write(`${lines.join("\n")}\n`);
  return EXIT.succeeded;
}
