import type { CommandKeySource } from '../../config/handler-options';
import type { ProviderMethodPort } from '../provider-methods/provider-method.door';

/** A CQRS command handler's `execute(command)`: keyed by an expression over `command`. */
export const COMMAND_PORT: ProviderMethodPort = {
  keySource: (args): CommandKeySource => ({ type: 'command', command: args[0] }),
};
