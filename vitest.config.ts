import { configDefaults, defineConfig } from "vitest/config";

/**
 * The real-node files that must have the node to themselves: they restart containerd or the
 * kubelet (faults), start clusters of their own beside it (cluster-up-down, install,
 * dev-cluster-store-on-node), or install a controller that watches every namespace (helm-release),
 * or register the cluster's one
 * APIService v1alpha1.logs.playbook.dev (log-api; log-archive, in the shared group, registers it too).
 */
const REAL_NODE_EXCLUSIVE = [
  "faults",
  "cluster-up-down",
  "dev-cluster-store-on-node",
  "install",
  "helm-release",
  "log-api",
  "log-archive-node-lost",
].map((name) => `test/real-node/${name}.test.ts`);

/**
 * PLAYBOOK_REAL_NODE_GROUP=shared: the files that can share the node two at a time;
 * =exclusive: the others (.ci/run runs the two groups one after the other); unset: all.
 */
function realNodeFiles(group: string | undefined): { include: string[]; exclude: string[] } {
  const all = ["test/real-node/**/*.test.ts"];
  if (group === "exclusive") return { include: REAL_NODE_EXCLUSIVE, exclude: configDefaults.exclude };
  if (group === "shared")
    return { include: all, exclude: [...configDefaults.exclude, ...REAL_NODE_EXCLUSIVE] };
  if (group === undefined || group === "") return { include: all, exclude: configDefaults.exclude };
  throw new Error(`PLAYBOOK_REAL_NODE_GROUP=${group}: expected shared or exclusive`);
}

export default defineConfig({
  test: {
    // Runner tests spawn real process trees and wait on real deadlines; two cores are shared.
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: "forks",
    fileParallelism: true,
    maxWorkers: 2,
    projects: [
      {
        extends: true,
        test: {
          name: "unit",
          include: ["test/unit/**/*.test.ts", "test/runner/**/*.test.ts"],
          globalSetup: ["test/harness/test-prerequisites.ts"],
        },
      },
      {
        extends: true,
        test: {
          name: "cluster",
          include: ["test/cluster/**/*.test.ts", "test/controller/**/*.test.ts"],
          // One shared control plane (built from tools/ on first use) for all cluster test files.
          globalSetup: ["test/harness/test-prerequisites.ts", "test/harness/global-setup.ts"],
          testTimeout: 120_000,
          // A cold Go build of the binaries can take several minutes.
          hookTimeout: 1_200_000,
          fileParallelism: false,
        },
      },
      // The smoke test of `npm run bench -- --quick` (a control plane of its own, 5 minutes at
      // most): on request, PLAYBOOK_BENCH=1, so that CI runs it alone rather than beside the
      // cluster tests, whose load would be measured with it.
      ...(process.env.PLAYBOOK_BENCH === "1"
        ? [
            {
              extends: true as const,
              test: {
                name: "bench",
                include: ["test/bench/**/*.test.ts"],
                globalSetup: ["test/harness/test-prerequisites.ts"],
                testTimeout: 300_000,
              },
            },
          ]
        : []),
      {
        extends: true,
        test: {
          name: "image",
          // The project's image run with testcontainers against podman's socket (or Docker's).
          include: ["test/image/**/*.test.ts"],
          // Builds the image when it is missing and starts the engine's socket. The controller
          // test starts a control plane of its own: the cluster project's setup is keyed to this
          // process and cannot run twice in it.
          globalSetup: ["test/harness/test-prerequisites.ts", "test/image/global-setup.ts"],
          testTimeout: 120_000,
          // A first build of the base stand-in and the image takes several minutes.
          hookTimeout: 1_200_000,
        },
      },
      // Pods in containerd under a real kubelet (root, containerd, runc, CNI plugins and a C
      // compiler; see docs/development.md "Real node"), on request: PLAYBOOK_REAL_NODE=1.
      ...(process.env.PLAYBOOK_REAL_NODE === "1"
        ? [
            {
              extends: true as const,
              test: {
                name: "real-node",
                ...realNodeFiles(process.env.PLAYBOOK_REAL_NODE_GROUP),
                globalSetup: ["test/harness/test-prerequisites.ts", "test/harness/global-setup-real-node.ts"],
                testTimeout: 180_000,
                hookTimeout: 1_200_000,
                // The shared group's files each work in namespaces of their own on one node: two
                // at a time. Everything else one at a time, as a developer's plain run has it.
                fileParallelism: process.env.PLAYBOOK_REAL_NODE_GROUP === "shared",
              },
            },
          ]
        : []),
    ],
  },
});
