// The versions the cluster-wide `auto` choices read (agent-delivery.ts, user-namespaces.ts): the
// API server's gitVersion and each node's `name://version` container runtime, compared by their
// major and minor numbers. Pure.

/** A major and minor version, e.g. [1, 35]. */
export type MajorMinor = readonly [number, number];

function majorMinor(version: string): MajorMinor | null {
  const match = /^v?(\d+)\.(\d+)/.exec(version);
  return match ? [Number(match[1]), Number(match[2])] : null;
}

const atLeast = (have: MajorMinor, need: MajorMinor) =>
  have[0] > need[0] || (have[0] === need[0] && have[1] >= need[1]);

/** Whether the API server's version (`v1.36.5`) is `need` or later; false when unknown or unreadable. */
export function serverAtLeast(server: string | undefined, need: MajorMinor): boolean {
  const have = server === undefined ? null : majorMinor(server);
  return have !== null && atLeast(have, need);
}

/** Whether a node's runtime (`containerd://2.4.2`) is one `minimums` names, at its version there or later. */
export function runtimeAtLeast(runtime: string, minimums: Readonly<Record<string, MajorMinor>>): boolean {
  const [name = "", version = ""] = runtime.split("://");
  const need = minimums[name];
  const have = majorMinor(version);
  return need !== undefined && have !== null && atLeast(have, need);
}
