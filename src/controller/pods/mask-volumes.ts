// The Secrets the runner masks (docs/secrets.md): every Secret any task names (env valueFrom,
// envFrom, a secret volume or a projected one's secret source) is mounted read-only in the runner's
// container alone, at /run/playbook/masks/<n>, and PLAYBOOK_MASK_DIRS lists those directories;
// the runner reads each file (up to 4 KiB) and prints its value as *** in the run's output
// (src/pod-runner/secret-mask.ts). The volumes are optional: a missing Secret is reported by the
// task container that names it (the kubelet's CreateContainerConfigError or FailedMount), never
// by the runner's mount. The controller names the Secrets and never reads them.
import type { PlaybookSpec } from "../../api/playbook.js";
import { allTasksOf } from "../../api/task-images.js";
import { secretsNamed, taskSourcesOf } from "../../api/task-sources.js";

export const MASK_DIRS_ENV_VAR = "PLAYBOOK_MASK_DIRS";
export const MASK_ROOT = "/run/playbook/masks";
export const MASK_VOLUME_PREFIX = "playbook-mask-";

/** Every Secret the spec's tasks name, sorted, each once. */
export function secretsToMask(spec: PlaybookSpec): string[] {
  const names = new Set<string>();
  for (const { task } of allTasksOf(spec)) {
    for (const name of secretsNamed(taskSourcesOf(task), spec.volumes)) names.add(name);
  }
  return [...names].sort();
}

export interface MaskMounts {
  volumes: Record<string, unknown>[];
  volumeMounts: Record<string, unknown>[];
  env: { name: string; value: string }[];
}

/** The runner container's mask volumes, mounts and env; all empty when no task names a Secret. */
export function maskMounts(spec: PlaybookSpec): MaskMounts {
  const secrets = secretsToMask(spec);
  if (secrets.length === 0) return { volumes: [], volumeMounts: [], env: [] };
  const dirs = secrets.map((_, index) => `${MASK_ROOT}/${index}`);
  return {
    volumes: secrets.map((secretName, index) => ({
      name: `${MASK_VOLUME_PREFIX}${index}`,
      secret: { secretName, optional: true },
    })),
    volumeMounts: dirs.map((mountPath, index) => ({
      name: `${MASK_VOLUME_PREFIX}${index}`,
      mountPath,
      readOnly: true,
    })),
    env: [{ name: MASK_DIRS_ENV_VAR, value: dirs.join(":") }],
  };
}
