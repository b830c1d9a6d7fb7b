// Changes to a pod the controller built, which make it one the controller did not build: shared by
// the envtest table of foreign pods (foreign-adoption.test.ts) and the real node's (foreign-pod.suite.ts).

/** A pod as JSON, its containers and volumes reachable to change. */
export type Json = Record<string, unknown> & { spec: { containers: Json[]; volumes: Json[] } & Json };

/** A CPU limit on the runner: the change and what the controller says of it. */
export const RUNNER_CPU_LIMIT = {
  kind: "a CPU limit on the runner, which throttles it to its request",
  change: (pod: Json) => {
    const runner = pod.spec.containers.find((c) => c.name === "runner") as Json & { resources: Json };
    runner.resources = {
      ...runner.resources,
      limits: { ...(runner.resources.limits as Json), cpu: "50m" },
    };
  },
  says: 'spec.containers[runner].resources.limits.cpu is "50m", the controller sets none',
};
