// The floors' import directions (DESIGN.md "Layout", docs/architecture.md): api is shared by
// all; runtime (controller plumbing) and pod-runner (the runner) build on api alone; the
// controller on api and runtime; the cli on any. `npm run lint` runs these rules.
const floor = (name) => `^src/${name}/`;

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: "api-imports-no-floor",
      comment: "src/api is the shared contract: it imports no other floor",
      severity: "error",
      from: { path: floor("api") },
      to: { path: "^src/(runtime|pod-runner|controller|cli)/" },
    },
    {
      name: "runtime-imports-only-api",
      comment: "src/runtime is controller plumbing: it builds on src/api only",
      severity: "error",
      from: { path: floor("runtime") },
      to: { path: "^src/(pod-runner|controller|cli)/" },
    },
    {
      name: "pod-runner-imports-only-api",
      comment:
        "src/pod-runner runs tasks in a pod and locally alike: it builds on src/api only, and shows progress through its own interface (progress-sink.ts)",
      severity: "error",
      from: { path: floor("pod-runner") },
      to: { path: "^src/(runtime|controller|cli)/" },
    },
    {
      name: "controller-imports-no-cli",
      comment: "src/controller never imports the command line",
      severity: "error",
      from: { path: floor("controller") },
      to: { path: floor("cli") },
    },
    {
      name: "cli-enters-the-runner-through-its-entries",
      comment:
        "a run enters src/pod-runner once, through local-entry.ts or pod-entry.ts; besides them the cli may use what it needs before a run (local-images, containment, subreaper), the rules' words (interrupts) and, to draw progress, the runner's event types and retry-wait's words",
      severity: "error",
      from: { path: floor("cli") },
      to: {
        path: floor("pod-runner"),
        pathNot:
          "^src/pod-runner/(local-entry|pod-entry|local-images|containment|subreaper|interrupts|progress-sink|retry-wait)\\.ts$",
        dependencyTypesNot: ["type-only"],
      },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    exclude: { path: "(^|/)(node_modules|dist)/" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
  },
};
