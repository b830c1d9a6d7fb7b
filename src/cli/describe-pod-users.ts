// The line of `playbook describe` that says whether the run's pod has its own user namespace
// (`hostUsers: false`, chosen by the controller's --user-namespaces when it created the pod). Pure:
// cluster/describe.ts reads the pod.

/** The run's pod as it could be read. */
export type RunPodRead =
  | { kind: "found"; name: string; hostUsers: boolean | undefined }
  | { kind: "none" }
  | { kind: "unreadable"; name: string; why: string };

export function podUsersLine(pod: RunPodRead): string {
  switch (pod.kind) {
    case "found":
      return pod.hostUsers === false
        ? `Users:      own user namespace (pod ${pod.name} has hostUsers: false): its users are unmapped on the node`
        : `Users:      the node's user namespace (pod ${pod.name}): the controller's --user-namespaces is off, or the cluster did not support them when it was created`;
    case "none":
      return "Users:      no pod now: the controller's --user-namespaces (auto|on|off) decides when it creates one";
    case "unreadable":
      return `Users:      pod ${pod.name} not readable (${pod.why})`;
  }
}
