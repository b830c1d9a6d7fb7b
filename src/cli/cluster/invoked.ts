// How the command was invoked, for the lines that tell a user what to run next.
import type { Cluster } from "./connection.js";

/** How the command is invoked (as program.ts names it), for the lines that tell what to run next. */
export function commandName(): string {
  const called = process.env.PLAYBOOK_INVOKED_AS || (process.argv[1] ?? "").replace(/^.*[/\\]/, "");
  return /^kubectl-playbook(\.js)?$/.test(called) ? "kubectl playbook" : "playbook";
}

/** ` -n NS` unless it is the default namespace, for the commands a line suggests. */
export function namespaceFlag(cluster: Cluster): string {
  return cluster.namespace === "default" ? "" : ` -n ${cluster.namespace}`;
}
