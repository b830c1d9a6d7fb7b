// The entry of the commands' script, dist/bin/commands.js: run, validate and pod-runner (see
// main.ts). jitless-zod.js must be evaluated before the schemas are built, so it comes first.
import "./jitless-zod.js";

export { runProgram } from "./program.js";
