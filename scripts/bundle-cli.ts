// `npm run build`'s second step: the whole `playbook` command bundled with every npm dependency,
// so that a start reads three files instead of resolving and compiling some 200 modules. The
// entry, dist/bin/playbook.js, answers --version alone; the commands and what they share (cli.js)
// and the controller with client-node, pino and prom-client (controller.js) are chunks beside it
// that a dynamic import loads when a command, or `playbook controller`, needs them.
import { chmodSync, readFileSync, rmSync } from "node:fs";
import path from "node:path";
import { build } from "rolldown";
import { z } from "zod";

const root = path.resolve(import.meta.dirname, "../..");
const outDir = path.join(root, "dist", "bin");
const { version } = z
  .object({ version: z.string().min(1) })
  .parse(JSON.parse(readFileSync(path.join(root, "package.json"), "utf8")));

/** The entry's own modules: in no chunk, or the entry would import that chunk statically. */
const ENTRY = /[\\/]src[\\/]cli[\\/](main|version)\.ts$/;
/** The controller command, and its start, which imports the controller. */
const CONTROLLER_START = /[\\/]src[\\/]cli[\\/]controller-(command|run)\.ts$/;
/**
 * What the commands other than `controller` load: our code outside the controller, and the three
 * packages they use. Everything else is the controller's alone (its flags too: the command and
 * its config are loaded only when argv names it); a test fails if `playbook run` loads
 * controller.js.
 */
const CLI =
  /[\\/](src[\\/](api|cli|pod-runner)[\\/]|node_modules[\\/](commander|yaml|zod)[\\/])|rolldown[\\/]runtime/;

// Chunks of the last build would otherwise stay beside the new ones.
rmSync(outDir, { recursive: true, force: true });
await build({
  input: { playbook: path.join(root, "src", "cli", "main.ts") },
  platform: "node",
  tsconfig: path.join(root, "tsconfig.json"),
  // The version is written in, so neither --version nor the image reads package.json.
  transform: { define: { __PLAYBOOK_VERSION__: JSON.stringify(version) } },
  treeshake: {
    // client-node's package.json has no sideEffects field, so without this every one of its
    // modules, the 2,700 generated API models among them, would stay in for what they might do
    // on import. They do nothing on import: only what the controller uses stays.
    moduleSideEffects: [
      { test: /[\\/]node_modules[\\/]@kubernetes[\\/]client-node[\\/]dist[\\/]/, sideEffects: false },
    ],
  },
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
          test: (id) => CLI.test(id) && !ENTRY.test(id) && !CONTROLLER_START.test(id),
          priority: 2,
        },
        { name: "controller", test: (id) => !ENTRY.test(id), priority: 1 },
      ],
    },
    sourcemap: true,
  },
});
chmodSync(path.join(outDir, "playbook.js"), 0o755);
