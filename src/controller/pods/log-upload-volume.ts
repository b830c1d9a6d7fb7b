// The runner's upload plan (src/api/log-upload.ts) in the pod: a Secret of the controller's,
// named after the pod, mounted in the runner's container alone. The URLs in it let their holder
// write the attempt's own segments, so no task container mounts it and it is not in the pod's
// spec, where whoever may read the pod would see it.
import { LOG_UPLOAD_FILE_ENV_VAR } from "../../api/log-upload.js";

const VOLUME = "log-upload";
const MOUNT_DIR = "/run/playbook/log-upload";
export const LOG_UPLOAD_PLAN_FILE_NAME = "plan.json";

/** The Secret the controller makes for the attempt's pod before it creates the pod. */
export function logUploadSecretName(podName: string): string {
  return `${podName}-log-upload`;
}

/** The runner container's env, mount and the pod's volume for the plan. */
export function logUploadMounts(podName: string): {
  env: { name: string; value: string }[];
  volumeMounts: { name: string; mountPath: string; readOnly: true }[];
  volumes: object[];
} {
  return {
    env: [{ name: LOG_UPLOAD_FILE_ENV_VAR, value: `${MOUNT_DIR}/${LOG_UPLOAD_PLAN_FILE_NAME}` }],
    volumeMounts: [{ name: VOLUME, mountPath: MOUNT_DIR, readOnly: true }],
    // Not optional: the pod waits for its Secret rather than run without its upload.
    volumes: [{ name: VOLUME, secret: { secretName: logUploadSecretName(podName), defaultMode: 0o444 } }],
  };
}
