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

// Every --dir, --cache, --out and --disk-dir option of `app` and its
// subcommands resolves a symlink to a folder to that folder.
void FollowFolderLinks(CLI::App* app);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_OPTION_RULES_H_
