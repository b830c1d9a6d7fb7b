// Generated Playbook specs for property-based tests: valid ones, and ones broken in the ways an
// operator (or a hostile client) breaks them — malformed durations, timeouts over the ceiling,
// duplicate and malformed names, reserved env names, huge strings, missing fields, wrong types.
import fc from "fast-check";

type Json = unknown;
type Spec = Record<string, Json> & { tasks?: Json };
type Task = Record<string, Json>;

const UNITS = ["ns", "us", "µs", "μs", "ms", "s", "m", "h"] as const;

/** Go durations the runner and the API server both read. */
export const validDuration: fc.Arbitrary<string> = fc.oneof(
  fc.tuple(fc.integer({ min: 1, max: 5000 }), fc.constantFrom(...UNITS)).map(([n, unit]) => `${n}${unit}`),
  fc.constantFrom("1h30m", "90s", ".5s", "1.5h", "5.s", "10m0s", "2m500ms", "0s", "0"),
);

/** Text that is not a duration, or a duration no Go program can hold. */
const malformedDuration: fc.Arbitrary<Json> = fc.oneof(
  fc.constantFrom("10", "5x", "-1m", "+5m", "1h30", "", " 5m", "5m ", "5 m", "1e3s", "00", "h", "5mm"),
  fc.constantFrom("ten minutes", "1H", "١s", "9999999999999h", "3000000h", "2562048h"),
  // Past the CRD's 64 characters, yet a fine duration.
  fc.constantFrom("1s".repeat(32), "1s".repeat(33), `${"0".repeat(62)}1s`, `${"0".repeat(63)}1s`),
  fc.string({ maxLength: 8 }),
  fc.constantFrom(5, 0, true, null, {}, ["5m"]),
);

const validName = fc.oneof(
  fc.constantFrom("build", "test", "deploy", "a", "0", "a-b", "x1"),
  fc.stringMatching(/^[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?$/),
);
const malformedName: fc.Arbitrary<Json> = fc.oneof(
  fc.constantFrom("Build", "a_b", "-a", "a-", "", "a.b", "é", " a", "a\nb"),
  fc.constantFrom("x".repeat(64), 5, null, true),
);

const validEnv = fc.record(
  {
    name: fc.oneof(
      fc.constantFrom("K", "HOME_DIR", "a.b-c", "_x"),
      fc.stringMatching(/^[A-Z_][A-Z0-9_]{0,15}$/),
    ),
    value: fc.string({ maxLength: 20 }),
  },
  { requiredKeys: ["name"] },
);

const validTask: fc.Arbitrary<Task> = fc.record(
  {
    name: validName,
    run: fc.oneof(
      fc.constantFrom("true", "make build", "echo $HOME", "sleep 1"),
      fc.string({ minLength: 1, maxLength: 40 }),
    ),
    timeout: fc.constantFrom("1m", "10m", "30m", "90s"),
    stall: validDuration,
    retries: fc.integer({ min: 0, max: 100 }),
    env: fc.array(validEnv, { maxLength: 3 }),
    workingDir: fc.constantFrom("/work", "/tmp", "relative/dir"),
    image: fc.constantFrom("registry.example/tools:1", "postgres:16", "runner", "amazon/aws-cli:2"),
  },
  { requiredKeys: ["name", "run"] },
);

/** Task names made unique, as a valid Playbook needs them. */
const uniqueNames = (tasks: Task[]): Task[] =>
  tasks.map((task, index) => ({ ...task, name: `${String(task.name).slice(0, 55)}-${index}` }));

/** Finally task names made unique, and apart from the main tasks' (which end in -<index>). */
const finallyNames = (tasks: Task[]): Task[] =>
  tasks.map((task, index) => ({ ...task, name: `fin-${index}-${String(task.name).slice(0, 50)}` }));

/** Valid specs: every field present or not, limits well inside the controller's defaults. */
export const validSpecs: fc.Arbitrary<Spec> = fc
  .record(
    {
      ceiling: fc.constantFrom("30m", "1h", "45m"),
      stall: validDuration,
      killGrace: validDuration,
      startTimeout: fc.constantFrom("30s", "5m", "10m", "1800s"),
      cancel: fc.boolean(),
      backoffLimit: fc.integer({ min: 0, max: 100 }),
      image: fc.constantFrom("registry.example/tools:1", "runner"),
      serviceAccountName: fc.constantFrom("default", "runner", "a.b-c"),
      resources: fc.constantFrom(
        { limits: { cpu: "500m", memory: "1Gi" } },
        { requests: { cpu: 1 } },
        { limits: { memory: "1.5e3Mi" } },
      ),
      ttlSecondsAfterFinished: fc.integer({ min: 0, max: 1_000_000 }),
      tasks: fc.array(validTask, { minLength: 1, maxLength: 4 }).map(uniqueNames),
      finallyCeiling: fc.constantFrom("30m", "1h", "5m"),
      finally: fc.array(validTask, { maxLength: 3 }).map(finallyNames),
    },
    { requiredKeys: ["tasks"] },
  )
  .map((spec) => spec as Spec);

const taskIndex = (spec: Spec, pick: number): number => pick % Math.max(1, (spec.tasks as Task[]).length);

/** The spec's finally tasks, one made when it has none. */
const finallyOf = (spec: Spec): Task[] => {
  if (!Array.isArray(spec.finally) || spec.finally.length === 0)
    spec.finally = [{ name: "fin", run: "true" }];
  return spec.finally as Task[];
};

/** One way of breaking a valid spec (some of which still leave it valid: the verdicts must agree either way). */
const breakages: fc.Arbitrary<(spec: Spec) => void>[] = [
  // Durations, malformed or out of range, at every level.
  fc
    .tuple(fc.constantFrom("ceiling", "stall", "killGrace", "startTimeout"), malformedDuration)
    .map(([field, value]) => (spec) => {
      spec[field] = value;
    }),
  fc
    .tuple(fc.constantFrom("timeout", "stall"), malformedDuration, fc.nat())
    .map(([field, value, pick]) => (spec) => {
      (spec.tasks as Task[])[taskIndex(spec, pick)] = {
        ...(spec.tasks as Task[])[taskIndex(spec, pick)],
        [field]: value,
      };
    }),
  // Timeouts against the ceiling: over it, at it, and over the controller's default when none is set.
  fc
    .tuple(fc.constantFrom("2h", "30m", "31m", "30m1ms", "1800s", "0s"), fc.boolean(), fc.nat())
    .map(([timeout, dropCeiling, pick]) => (spec) => {
      spec.ceiling = "30m";
      if (dropCeiling) delete spec.ceiling;
      ((spec.tasks as Task[])[taskIndex(spec, pick)] as Task).timeout = timeout;
    }),
  // Start timeouts against the ceiling, as for task timeouts; and zero.
  fc
    .tuple(fc.constantFrom("2h", "30m", "31m", "30m1ms", "1800s", "0s", "0"), fc.boolean())
    .map(([startTimeout, dropCeiling]) => (spec) => {
      spec.ceiling = "30m";
      if (dropCeiling) delete spec.ceiling;
      spec.startTimeout = startTimeout;
    }),
  // Ceilings past the controller's maximum, or zero.
  fc.constantFrom("25h", "24h", "24h0m1s", "0s", "1000h").map((ceiling) => (spec) => {
    spec.ceiling = ceiling;
    for (const task of spec.tasks as Task[]) delete task.timeout;
  }),
  // Finally tasks: timeouts against their ceiling, a name a main task has, too many, a bad ceiling.
  fc
    .tuple(
      fc.constantFrom("2h", "5m", "5m1ms", "300s", "10m", "0s"),
      fc.constantFrom("5m", undefined),
      fc.nat(),
    )
    .map(([timeout, ceiling, pick]) => (spec) => {
      const tasks = finallyOf(spec);
      if (ceiling === undefined) delete spec.finallyCeiling;
      else spec.finallyCeiling = ceiling;
      (tasks[pick % tasks.length] as Task).timeout = timeout;
    }),
  fc.nat().map((pick) => (spec) => {
    const tasks = finallyOf(spec);
    (tasks[pick % tasks.length] as Task).name = ((spec.tasks as Task[])[taskIndex(spec, pick)] as Task).name;
  }),
  fc.nat().map((pick) => (spec) => {
    const tasks = finallyOf(spec);
    tasks.push({ ...(tasks[pick % tasks.length] as Task) });
  }),
  fc.constantFrom(20, 21).map((count) => (spec) => {
    spec.finally = Array.from({ length: count }, (_, i) => ({ name: `f${i}`, run: "true" }));
  }),
  fc.tuple(malformedDuration, fc.boolean()).map(([value, withTasks]) => (spec) => {
    spec.finallyCeiling = value;
    if (withTasks) finallyOf(spec);
  }),
  fc
    .tuple(fc.constantFrom("timeout", "stall", "env", "image", "run"), malformedDuration)
    .map(([field, value]) => (spec) => {
      (finallyOf(spec)[0] as Task)[field] = value;
    }),
  fc.constantFrom(null, {}, "x", [null]).map((value) => (spec) => {
    spec.finally = value;
  }),
  // Names: duplicated, malformed, too long.
  fc.nat().map((pick) => (spec) => {
    const tasks = spec.tasks as Task[];
    tasks.push({ ...(tasks[taskIndex(spec, pick)] as Task) });
  }),
  fc.tuple(malformedName, fc.nat()).map(([name, pick]) => (spec) => {
    ((spec.tasks as Task[])[taskIndex(spec, pick)] as Task).name = name;
  }),
  // Environment: reserved and malformed names, entries of the wrong shape.
  fc
    .tuple(
      fc.oneof(
        fc.constantFrom("PLAYBOOK_PLAN", "PLAYBOOK_X", "PLAYBOOK_", "playbook_x", "1A", "A=B", "", "A B"),
        fc.constantFrom("x".repeat(256), "x".repeat(257), 5, null),
      ),
      fc.oneof(fc.string({ maxLength: 10 }), fc.constantFrom(null, 5, "a\u0000b")),
      fc.nat(),
    )
    .map(([name, value, pick]) => (spec) => {
      ((spec.tasks as Task[])[taskIndex(spec, pick)] as Task).env = [{ name, value }];
    }),
  fc
    .tuple(fc.constantFrom({ name: "K", extra: 1 }, { value: "v" }, "K=V", {}, null), fc.nat())
    .map(([entry, pick]) => (spec) => {
      ((spec.tasks as Task[])[taskIndex(spec, pick)] as Task).env = [entry];
    }),
  fc.nat().map((pick) => (spec) => {
    ((spec.tasks as Task[])[taskIndex(spec, pick)] as Task).env = Array.from({ length: 129 }, (_, i) => ({
      name: `E${i}`,
    }));
  }),
  // Huge strings, counted in bytes, UTF-16 units and code points alike.
  fc
    .tuple(
      fc.constantFrom("run", "workingDir", "name"),
      fc.constantFrom(
        "x".repeat(65536),
        "x".repeat(65537),
        "😀".repeat(32768),
        "😀".repeat(32769),
        "é".repeat(65536),
        "é".repeat(65535),
        "x".repeat(4096),
        "x".repeat(4097),
        "a\u0000b",
      ),
      fc.nat(),
    )
    .map(([field, value, pick]) => (spec) => {
      spec.tasks = [{ ...((spec.tasks as Task[])[taskIndex(spec, pick)] as Task), [field]: value }];
    }),
  fc
    .tuple(
      fc.constantFrom(
        "x".repeat(140_000),
        "😀".repeat(40_000),
        "é".repeat(70_000),
        "x".repeat(32_001),
        "😀".repeat(32_000),
      ),
      fc.nat(),
    )
    .map(([value, pick]) => (spec) => {
      spec.tasks = [
        { ...((spec.tasks as Task[])[taskIndex(spec, pick)] as Task), env: [{ name: "BIG", value }] },
      ];
    }),
  // A task's image: malformed, too long, or one distinct image too many.
  fc
    .tuple(
      fc.constantFrom<Json>(
        "Postgres:16",
        "a//b",
        "postgres:",
        `${"x/".repeat(256)}x`,
        "",
        5,
        "alpine@sha256:abc",
      ),
      fc.nat(),
    )
    .map(([value, pick]) => (spec) => {
      const task = (spec.tasks as Task[])[taskIndex(spec, pick)] as Task;
      task.image = value;
    }),
  fc.integer({ min: 8, max: 10 }).map((count) => (spec) => {
    spec.tasks = Array.from({ length: count }, (_, i) => ({ name: `t${i}`, run: "true", image: `i${i}:1` }));
  }),
  fc
    .tuple(
      fc.constantFrom("image", "serviceAccountName"),
      fc.constantFrom(
        "x".repeat(253),
        "x".repeat(254),
        "x".repeat(1024),
        "x".repeat(1025),
        "",
        "Runner",
        "-a",
      ),
    )
    .map(([field, value]) => (spec) => {
      spec[field] = value;
    }),
  // Many tasks, or a plan too big to carry.
  fc.constantFrom(200, 201).map((count) => (spec) => {
    spec.tasks = Array.from({ length: count }, (_, i) => ({ name: `t${i}`, run: "true" }));
  }),
  fc.constantFrom(3, 4).map((count) => (spec) => {
    spec.tasks = Array.from({ length: count }, (_, i) => ({ name: `t${i}`, run: "x".repeat(60_000) }));
  }),
  // Missing fields.
  fc.constantFrom("tasks", "run", "name", "all-tasks").map((what) => (spec) => {
    const tasks = spec.tasks as Task[];
    if (what === "tasks") delete spec.tasks;
    else if (what === "all-tasks") spec.tasks = [];
    else delete (tasks[0] as Task)[what];
  }),
  // Wrong types and ranges.
  fc
    .tuple(
      fc.constantFrom("cancel", "backoffLimit", "ttlSecondsAfterFinished", "tasks", "resources"),
      fc.constantFrom("true", 1, 1.5, -1, 101, 2 ** 31, 2 ** 53, "2", null, {}, [], "x"),
    )
    .map(([field, value]) => (spec) => {
      spec[field] = value;
    }),
  fc
    .tuple(
      fc.constantFrom("retries", "run", "env", "workingDir"),
      fc.constantFrom("1", 1.5, -1, 101, 7, null, {}, [], ""),
      fc.nat(),
    )
    .map(([field, value, pick]) => (spec) => {
      ((spec.tasks as Task[])[taskIndex(spec, pick)] as Task)[field] = value;
    }),
  fc
    .constantFrom(
      { limits: { cpu: "abc" } },
      { limits: { cpu: -1 } },
      { limits: { cpu: "1.5" } },
      { limits: { cpu: "1e3" } },
      { limits: { cpu: "1e1.5" } },
      { limits: { cpu: 1.5 } },
      { requests: { cpu: 2 ** 53 } },
      { limits: { cpu: "+1" } },
      { limits: "1" },
      { requests: { memory: "1GB" } },
      { claims: [{}] },
      { claims: Array.from({ length: 17 }, (_, i) => ({ name: `c${i}` })) },
      { other: {} },
    )
    .map((resources) => (spec) => {
      spec.resources = resources;
    }),
  // Null where a value belongs (YAML's `timeout:` with nothing after it).
  fc
    .tuple(
      fc.constantFrom(
        "ceiling",
        "stall",
        "killGrace",
        "cancel",
        "backoffLimit",
        "image",
        "resources",
        "tasks",
      ),
      fc.constantFrom("timeout", "stall", "retries", "env", "workingDir", "run", "name"),
      fc.constantFrom("spec", "task", "env", "item"),
      fc.nat(),
    )
    .map(([specField, taskField, where, pick]) => (spec) => {
      const task = (spec.tasks as Task[])[taskIndex(spec, pick)] as Task;
      if (where === "spec") spec[specField] = null;
      else if (where === "task") task[taskField] = null;
      else if (where === "env") task.env = [{ name: "K", value: null }];
      else task.env = [null];
    }),
  // Fields nobody defined.
  fc.constantFrom("spec", "task").map((where) => (spec) => {
    if (where === "spec") spec.command = "true";
    else ((spec.tasks as Task[])[0] as Task).command = "true";
  }),
];

/** Valid specs broken in one to three ways. */
export const invalidSpecs: fc.Arbitrary<Spec> = fc
  .tuple(validSpecs, fc.array(fc.oneof(...breakages), { minLength: 1, maxLength: 3 }))
  .map(([spec, breaks]) => {
    const copy = structuredClone(spec);
    for (const breakIt of breaks) {
      if (
        !Array.isArray(copy.tasks) ||
        copy.tasks.length === 0 ||
        typeof copy.tasks[0] !== "object" ||
        copy.tasks[0] === null
      ) {
        copy.tasks = [{ name: "a", run: "true" }];
      }
      breakIt(copy);
    }
    return copy;
  });
