#include "cli/cli.h"

int main(int argc, char** argv) { return shadowsync::cli::RunCli(argc, argv); }
