// The rules every option of every `kvtier` command follows, applied by
// main() to the whole command tree once the commands have registered:
// integers are plain decimal that must fit (CLI11 alone would wrap "-5" or
// read "010" as octal), and a folder option given as a symlink to a folder
// means that folder.
//
// Thread safety: call from main() before parsing.
#ifndef KVTIER_TOOLS_OPTION_RULES_H_
#define KVTIER_TOOLS_OPTION_RULES_H_

#include <CLI/CLI.hpp>

namespace kvtier::cli {

// Every integer option of `app` and its subcommands takes plain decimal
// only, refusing with its name a value that does not fit.
void RequireDecimalIntegers(CLI::App* app);

// Every size option (declared with ->type_name("SIZE")) takes what an
// option of docs/options.md takes: bytes, or a number with a unit (1.5GB,
// 512MiB, and the K, M, G, T = KiB.. of `gc --max-bytes 512M`), through the
// one size parser of the options table.
void AcceptSizeUnits(CLI::App* app);

// Every --dir, --cache, --out and --disk-dir option of `app` and its
// subcommands resolves a symlink to a folder to that folder.
void FollowFolderLinks(CLI::App* app);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_OPTION_RULES_H_
