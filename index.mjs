// The package entry for plain Node (no TypeScript loader needed by the application): registers
// tsx for this package's modules, then re-exports index.ts.
import { tsImport } from 'tsx/esm/api';

const m = await tsImport('./index.ts', import.meta.url);
export const {
  createDataplane,
  Dataplane,
  DataplaneError,
  VERSION,
  parseConfig,
  loadConfig,
  ConfigError,
  startApi,
  buildServer,
  ApiClient,
  ApiError,
  ApiConnectionError,
} = m;
