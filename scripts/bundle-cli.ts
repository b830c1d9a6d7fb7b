// `npm run build`'s second step: the whole `playbook` command bundled with every npm dependency,
// so that a start reads a few files instead of resolving and compiling some 200 modules. The
// entry, dist/bin/playbook.js, answers --version alone; the chunks beside it are loaded by
// dynamic imports when a command needs them: cli.js (the commands, commander, zod, yaml), the
// runner's (src/pod-runner: local-entry.js, pod-entry.js, session.js, for run and pod-runner)
// and controller.js (the controller with client-node, pino and prom-client, for `playbook
// controller` alone). run, validate and pod-runner start from a script of their own
// (commands.js), and the cluster commands from another (cluster-commands.js), each run with a
// code cache (see below).
import { createHash } from "node:crypto";
import { appendFileSync, chmodSync, readFileSync, renameSync, rmSync } from "node:fs";
import path from "node:path";
import { build, type RolldownPlugin } from "rolldown";
import { z } from "zod";
import { writeThirdPartyFiles } from "./third-party-notices.js";

const root = path.resolve(import.meta.dirname, "../..");
const binDir = path.join(root, "dist", "bin");
// Built beside it, then swapped in: a test or benchmark that starts dist/bin/playbook.js while
// a build runs finds the old files whole, missing only for the moment of the swap.
const outDir = path.join(root, "dist", "bin.next");
const { name, version } = z
  .object({ name: z.string().min(1), version: z.string().min(1) })
  .parse(JSON.parse(readFileSync(path.join(root, "package.json"), "utf8")));

/** The entry's own modules: in no chunk, or the entry would import that chunk statically. */
const ENTRY = /[\\/]src[\\/]cli[\\/](main|version|code-cache)\.ts$/;
/** What only the commands that run tasks load: the runner (src/pod-runner). */
const RUNNER = /[\\/]src[\\/]pod-runner[\\/]/;
/** The controller command, and its start, which imports the controller. */
const CONTROLLER_START = /[\\/]src[\\/]cli[\\/]controller-(command|run)\.ts$/;
/**
 * What the commands other than `controller` load: our code outside the controller, and the three
 * packages they use. Everything else is the controller's alone (its flags too: the command and
 * its config are loaded only when argv names it); a test fails if `playbook run` loads
 * controller.js.
 */
const CLI = /[\\/](src[\\/](api|cli)[\\/]|node_modules[\\/](commander|yaml|zod)[\\/])|rolldown[\\/]runtime/;
/**
 * A CronPlaybook's schema and its schedule library (croner, which is the controller's): left to
 * the controller's chunk, which `playbook validate` of a CronPlaybook alone loads besides it.
 */
const CRON = /[\\/]src[\\/]api[\\/]cron-(playbook|schedule)\.ts$/;
/**
 * The cluster commands' work (submit, wait, cancel, logs; their definitions are in cli.js): with
 * the API client and client-node's KubeConfig, in cluster.js, which only they load.
 */
const CLUSTER =
  /[\\/]src[\\/](cli[\\/]cluster[\\/](?!commands\.ts$)|runtime[\\/](api-client|api-credentials|api-errors|api-proxy|kube-config)\.ts$)|[\\/]node_modules[\\/]@kubernetes[\\/]client-node[\\/]/;

/**
 * node:http for the ES module chunks, taken with process.getBuiltinModule instead of imported. An
 * import of a built-in into an ES module makes Node build its module facade, which reads every
 * export, and three of node:http's (WebSocket, CloseEvent, MessageEvent) load undici: some 60 ms
 * of every cluster command's and the controller's start, for exports nothing here uses. The
 * module's other exports are its own, listed when the bundle is built (Node 24, as it runs on).
 */
const HTTP_UNDICI_EXPORTS = new Set(["WebSocket", "CloseEvent", "MessageEvent"]);
const HTTP_MODULE = "\0playbook-builtin:http";
function httpWithoutUndici() {
  return {
    name: "http-without-undici",
    resolveId(source: string) {
      return source === "http" || source === "node:http"
        ? { id: HTTP_MODULE, moduleSideEffects: false }
        : null;
    },
    load(id: string) {
      if (id !== HTTP_MODULE) return null;
      const http = process.getBuiltinModule("node:http");
      const names = Object.getOwnPropertyNames(http).filter(
        (key) => /^[A-Za-z_$][\w$]*$/.test(key) && key !== "default" && !HTTP_UNDICI_EXPORTS.has(key),
      );
      return [
        'const http = process.getBuiltinModule("node:http");',
        "export default http;",
        `export const { ${names.join(", ")} } = http;`,
      ].join("\n");
    },
  };
}

/**
 * supports-color, which debug (under client-node's SOCKS proxy agent) asks for in a try block
 * and which nothing here installs: left to be found at run time, every cluster command's start
 * searched the folders above the bundle for it (and would run one found there). It is bundled as
 * absent instead, as debug takes it when it cannot be found: no colors.
 */
const ABSENT_MODULE = "\0playbook-absent:supports-color";
function supportsColorAbsent() {
  return {
    name: "supports-color-absent",
    resolveId(source: string) {
      return source === "supports-color" ? { id: ABSENT_MODULE, moduleSideEffects: false } : null;
    },
    load(id: string) {
      return id === ABSENT_MODULE ? "module.exports = undefined;" : null;
    },
  };
}

/**
 * undici, which client-node's KubeConfig imports, loaded when first used instead of when the
 * bundle loads: only a kubeconfig with a SOCKS proxy or an auth provider reaches it (the API
 * client speaks node:https), yet its evaluation was some 20 ms of every cluster command's and the
 * controller's start. Where it is bundled (a CommonJS module, already a function run once on
 * first need) and where it is a file of its own (undici.cjs, beside the cluster commands' script),
 * its one eager load becomes a proxy that loads it on the first property read. The line count is
 * unchanged, so the source maps still hold.
 */
const EAGER_UNDICI = /^(var|let) (\w*undici\w*) = (require_undici\(\)|require\("\.\/undici\.cjs"\));$/gm;
const UNDICI_LOAD = /\b(require_undici\(\)|require\("\.\/undici\.cjs"\))/g;
function lazyUndici() {
  return {
    name: "lazy-undici",
    renderChunk(code: string, chunk: { fileName: string }) {
      let made = 0;
      const lazy = code.replace(EAGER_UNDICI, (_, kind: string, name: string, load: string) => {
        made++;
        return `${kind} ${name} = new Proxy({}, { get: (_, key) => ${load}[key] });`;
      });
      // Any other load would be eager after all: a new bundler or client-node; look again.
      const loads = lazy.match(UNDICI_LOAD)?.length ?? 0;
      if (loads !== made) {
        throw new Error(`${chunk.fileName}: ${loads - made} load(s) of undici not made lazy`);
      }
      return made === 0 ? null : { code: lazy, map: null };
    },
  };
}

/**
 * Built-in modules a cluster command's start does not need, loaded on first use instead of when
 * the cluster commands' script loads: readline (a watch's lines, read once the watch answers) and
 * dns (client-node's proxies; a server named by its address needs no lookup). They were some 3 ms
 * of every start, before the Playbook was created. (child_process and vm stay: commander and
 * client-node's exec authenticator take child_process as they load, and playbook.js runs the
 * script with vm.) A module's eager load, and the namespace object rolldown makes of it on the
 * next line, becomes a proxy that loads it on the first property read; every use of them in the
 * script is a property read.
 */
const LAZY_BUILTINS = ["readline", "dns"];
const EAGER_BUILTIN = new RegExp(
  `^let (\\w+) = require\\("((?:node:)?(?:${LAZY_BUILTINS.join("|")}))"\\);(\n\\1 = __toESM\\(\\1, 1\\);)?$`,
  "gm",
);
function lazyBuiltins() {
  return {
    name: "lazy-builtins",
    renderChunk(code: string, chunk: { fileName: string }) {
      const made = new Set<string>();
      const lazy = code.replace(EAGER_BUILTIN, (_, name: string, specifier: string, esm?: string) => {
        made.add(specifier.replace(/^node:/, ""));
        const load = esm ? `__toESM(require("${specifier}"), 1)` : `require("${specifier}")`;
        return `let ${name} = new Proxy({}, { get: (_, key) => (__lazy_${name} ??= ${load})[key] }), __lazy_${name};`;
      });
      // Another form of load would stay eager: a new bundler; look again.
      const missing = LAZY_BUILTINS.filter((builtin) => !made.has(builtin));
      if (missing.length > 0) {
        throw new Error(`${chunk.fileName}: no eager load of ${missing.join(", ")} to make lazy`);
      }
      return { code: lazy, map: null };
    },
  };
}

/**
 * The cluster commands' dynamic imports of their work (actions.js, watch.js, logs.js) as static
 * imports, for the cluster commands' script alone. A script is one file, so rolldown inlines a
 * dynamic import and wraps the module it loads, and everything that module shares with the rest,
 * to evaluate it later: a wrapped client-node keeps all of its 2,700 generated models (some 2 MB)
 * for what their evaluation might do. The work is what that script is loaded for anyway.
 */
const CLUSTER_WORK = /[\\/]src[\\/]cli[\\/]cluster[\\/](actions|commands)\.ts$/;
function clusterWorkStatic() {
  return {
    name: "cluster-work-static",
    transform(code: string, id: string) {
      if (!CLUSTER_WORK.test(id)) return null;
      const modules: string[] = [];
      const rewritten = code.replace(/\bimport\("(\.\/[\w-]+\.js)"\)/g, (_, specifier: string) => {
        modules.push(specifier);
        return `Promise.resolve(__static_${modules.length - 1})`;
      });
      if (modules.length === 0) throw new Error(`${id}: no dynamic import left to make static`);
      const imports = modules.map((specifier, i) => `import * as __static_${i} from "${specifier}";`);
      return { code: `${imports.join("\n")}\n${rewritten}`, map: null };
    },
  };
}

/**
 * client-node's package.json has no sideEffects field, so without this every one of its modules,
 * the 2,700 generated API models among them, would stay in for what they might do on import.
 * They do nothing on import: only what the controller and the cluster commands use stays.
 */
const CLIENT_NODE_SIDE_EFFECTS = [
  { test: /[\\/]node_modules[\\/]@kubernetes[\\/]client-node[\\/]dist[\\/]/, sideEffects: false },
];

rmSync(outDir, { recursive: true, force: true });
await build({
  input: { playbook: path.join(root, "src", "cli", "main.ts") },
  plugins: [httpWithoutUndici(), supportsColorAbsent(), lazyUndici()],
  platform: "node",
  tsconfig: path.join(root, "tsconfig.json"),
  // The version is written in, so neither --version nor the image reads package.json.
  transform: {
    define: {
      __PLAYBOOK_VERSION__: JSON.stringify(version),
      // The script the entry runs run, validate and pod-runner from: the second build below.
      __PLAYBOOK_COMMANDS_SCRIPT__: JSON.stringify("commands.js"),
      __PLAYBOOK_CLUSTER_COMMANDS_SCRIPT__: JSON.stringify("cluster-commands.js"),
    },
  },
  treeshake: { moduleSideEffects: CLIENT_NODE_SIDE_EFFECTS },
  output: {
    dir: outDir,
    format: "esm",
    entryFileNames: "[name].js",
    // Stable names: the tests tell by them which chunks a command loaded.
    chunkFileNames: "[name].js",
    codeSplitting: {
      groups: [
        {
          name: "cli",
          test: (id) =>
            CLI.test(id) &&
            !CRON.test(id) &&
            !CLUSTER.test(id) &&
            !ENTRY.test(id) &&
            !CONTROLLER_START.test(id) &&
            !RUNNER.test(id),
          priority: 3,
        },
        { name: "cluster", test: (id) => CLUSTER.test(id), priority: 2 },
        // The runner's modules are left to the dynamic imports that load them (its entries).
        { name: "controller", test: (id) => !ENTRY.test(id) && !RUNNER.test(id), priority: 1 },
      ],
    },
    sourcemap: true,
  },
});
// run, validate and pod-runner start from a second bundle of the same program: one CommonJS
// script, which the entry runs through node:vm with a code cache made after the command ran
// (src/cli/code-cache.ts); an ES module's cache can only be Node's, made before it runs. The
// controller's command is left out: the entry sends argv that names it to the modules above.
/**
 * One of the commands' scripts: the program from src/cli/commands.ts as one CommonJS file that
 * playbook.js runs through node:vm, in ASCII (read without decoding UTF-8; JSDoc comments, the
 * rest of what is not, are left out).
 */
function buildScript(
  name: string,
  options: { plugins?: RolldownPlugin[]; external: (string | RegExp)[]; banner: string },
) {
  return build({
    input: { [name]: path.join(root, "src", "cli", "commands.ts") },
    plugins: options.plugins ?? [],
    platform: "node",
    tsconfig: path.join(root, "tsconfig.json"),
    external: [/[\\/]controller-command\.js$/, /^\.\/controller-command\.js$/, ...options.external],
    treeshake: { moduleSideEffects: CLIENT_NODE_SIDE_EFFECTS },
    output: {
      // undici is loaded from a file of its own where it is left out (below).
      paths: { undici: "./undici.cjs" },
      dir: outDir,
      format: "cjs",
      entryFileNames: "[name].js",
      codeSplitting: false,
      charset: "ascii",
      comments: { legal: true, annotation: true, jsdoc: false },
      sourcemap: true,
      banner: options.banner,
    },
  });
}
// The controller's command and the cluster commands' work are never run from this script.
// Nor is `advise cron` / `advise -l` (cluster/advise.js) or `advise --prometheus`
// (cluster/advise-prometheus.js): advise starts from the program's modules.
await buildScript("commands", {
  external: [/^\.\/actions\.js$/, /^\.\/cluster\/advise\.js$/, /^\.\/cluster\/advise-prometheus\.js$/],
  banner:
    "// The playbook command's run, validate and pod-runner: a script that playbook.js runs through node:vm.",
});
// submit, wait, cancel, logs and cron trigger start from a third script: the same program with
// the cluster commands' work (client-node's KubeConfig, the API client) inlined, so their start
// too is compiled code from a cache made after the command ran. Node's cache of the ES module
// chunks holds only what a module's first evaluation compiled; every function first called later
// (commander's parse, zod's schemas, the YAML parser, the kubeconfig's loading) was compiled
// again at each start, some 100 ms before the Playbook was created.
await buildScript("cluster-commands", {
  plugins: [httpWithoutUndici(), supportsColorAbsent(), clusterWorkStatic(), lazyUndici(), lazyBuiltins()],
  external: ["undici", /^\.\/cluster\/advise\.js$/, /^\.\/cluster\/advise-prometheus\.js$/],
  banner:
    "// The playbook command's cluster commands (submit, wait, cancel, logs, cron): a script that playbook.js runs through node:vm.",
});
// undici for the cluster commands' script, which loads it only if it is used (lazyUndici): a
// file of its own, so that the script each of their starts reads and compiles is half the size.
// .cjs: package.json's "type": "module" would make a .js file an ES module, without its exports.
await build({
  input: { undici: path.join(root, "node_modules", "undici", "index.js") },
  platform: "node",
  output: { dir: outDir, format: "cjs", entryFileNames: "[name].cjs", codeSplitting: false, sourcemap: true },
});
// The key of each script's code cache (src/cli/code-cache.ts): a hash of its content on its last
// line, so that a new build (an upgrade) never starts from the bytecode of the one before, even at
// the same length and time (V8 checks only the length; npm gives every file the same time).
for (const script of ["commands.js", "cluster-commands.js"]) {
  const file = path.join(outDir, script);
  const hash = createHash("sha256").update(readFileSync(file)).digest("hex");
  appendFileSync(file, `\n// code-cache-key: sha256-${hash}\n`);
}
// The licences of the packages the bundle inlines, and an SBOM of them, from its source maps
// (scripts/third-party-notices.ts); a bundled package without a permissive licence fails here.
writeThirdPartyFiles(outDir, { name, version });
chmodSync(path.join(outDir, "playbook.js"), 0o755);
// Chunks of the last build would otherwise stay beside the new ones.
rmSync(binDir, { recursive: true, force: true });
renameSync(outDir, binDir);
