// zod compiles a fast path (new Function) for each object schema at its first parse: run,
// validate and pod-runner parse a few objects once, so they would pay that compile and never gain
// from it. zod reads the setting when a schema is built, so this module is imported before any
// module that builds one (commands.ts); the controller, which parses all day, keeps the fast path.
import { z } from "zod";

z.config({ jitless: true });
