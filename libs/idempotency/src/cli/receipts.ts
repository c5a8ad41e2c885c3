import { Command } from 'commander';
import { RECEIPT_CHAINS, verifyChain, type ChainReport } from '../core/receipts';
import { withStore } from './connection';
import { CommandContext } from './context';
import { CliError, ExitCode } from './exit-codes';

/** The subcommand (`receipts verify`); the command this file adds is `receipts`. */
const VERIFY = 'verify';

interface ReceiptsVerifyOptions {
  json?: boolean;
}

/**
 * `receipts verify`: walks every receipt chain of the store from its start,
 * recomputes each receipt's hash and its link to the one before, and
 * reports the first altered, removed or reordered receipt of each chain
 * (`chain N position M: altered`). Reads only: it never changes a record or
 * a receipt. Exit 0 with a summary when every chain holds; 1 on any finding.
 */
export function addReceiptsCommand(program: Command, context: CommandContext): void {
  const receipts = program
    .command('receipts')
    .description('work with the receipts of terminal records (receipts: true)');
  receipts
    .command(VERIFY)
    .description(
      'recompute every receipt chain and report any altered, removed or reordered receipt (reads only)',
    )
    .option('--json', 'print JSON')
    .action(async (options: ReceiptsVerifyOptions, command: Command) => {
      const connection = context.connection(command);
      await withStore(connection, async ({ store, where }) => {
        const support = store.receipts;
        if (!support) {
          throw new CliError(`the store in ${where} keeps no receipts`, ExitCode.ERROR);
        }
        await support.check();
        const progress = context.progress(options);
        const reports: ChainReport[] = [];
        for (let chain = 0; chain < RECEIPT_CHAINS; chain++) {
          progress.show(`receipts verify: chain ${chain + 1} of ${RECEIPT_CHAINS}`);
          reports.push(await verifyChain(support, chain));
        }
        const findings = reports.flatMap((report) => (report.finding ? [report.finding] : []));
        const total = reports.reduce((sum, report) => sum + report.receipts, 0);
        if (findings.length > 0) context.exitCode = ExitCode.VERIFY_FAILED;
        if (options.json) {
          context.printJson({ where, receipts: total, chains: RECEIPT_CHAINS, findings });
          return;
        }
        for (const finding of findings) {
          context.print(`chain ${finding.chain} position ${finding.position}: ${finding.problem}`);
        }
        context.print(
          findings.length === 0
            ? `${total} receipts in ${RECEIPT_CHAINS} chains verified in ${where}`
            : `${findings.length} of ${RECEIPT_CHAINS} chains in ${where} are broken (${total} receipts read); nothing was changed`,
        );
      });
    });
}
