// Reading an archived log back through the API server's aggregation layer, beside the scripted
// node: the controller's log API reached at an address of this machine (log-api.suite.ts).
import { logApiSuite } from "./log-api.suite.js";

logApiSuite();
