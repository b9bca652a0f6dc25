// Launch scripts as users write them: shell variables expanded, the launcher's GPU count and the
// DeepSpeed config it names read (colo/planner/launch.h).
#include "colo/planner/launch.h"

#include "colo/planner/export_check.h"
#include "launch_conditions.h"

#include <gtest/gtest.h>

namespace colo::planner {
namespace {

TEST(Launch, ShellVariablesAndArithmeticExpandAsBashWould) {
  const std::string script =
      "#!/bin/bash\n"
      "GPUS_PER_NODE=8\n"
      "export NNODES=\"2\"\n"
      "WORLD_SIZE=$(($GPUS_PER_NODE*$NNODES))\n"
      "TP=${TP:-4}\n"
      "DP=$(( WORLD_SIZE / (TP * 2) ))\n"
      "ARGS=( --num-layers 4 )\n"
      "# a comment keeps its $GPUS_PER_NODE\n"
      "torchrun --nproc_per_node ${GPUS_PER_NODE} --nnodes $NNODES train.py --dp $DP --gbs $((DP * 16)) ${ARGS[@]} $UNSET\n";
  auto out = expandShellVariables(script);
  ASSERT_TRUE(out) << out.error().toString();
  EXPECT_NE(out->find("WORLD_SIZE=16\n"), std::string::npos) << *out;
  EXPECT_NE(out->find("TP=4\n"), std::string::npos) << *out;  // the default of an unset name
  // An array expands to its elements (${ARGS[@]}); an unset name stays as written.
  EXPECT_NE(out->find("--nproc_per_node 8 --nnodes 2 train.py --dp 2 --gbs 32   --num-layers 4  $UNSET"), std::string::npos) << *out;
  EXPECT_NE(out->find("# a comment keeps its $GPUS_PER_NODE"), std::string::npos);
  // What colo cannot evaluate stays as written (a division by zero, an undefined name, a command
  // substitution, a ternary): a line that does not matter does not stop the import, and one that does
  // is named where it is used.
  auto zero = expandShellVariables("N=0\nX=$((8 / N))\n");
  ASSERT_TRUE(zero) << zero.error().toString();
  EXPECT_NE(zero->find("X=$((8 / N))"), std::string::npos) << *zero;
  auto odd = expandShellVariables("num_gpus=$(($(ds_ssh nvidia-smi --list-gpus | wc -l)-2))\n"
                                  "latest=$(( a > b ? a : b ))\nX=$((GPUS * 2))\nN=4\nY=$((N * 2))\n");
  ASSERT_TRUE(odd) << odd.error().toString();
  EXPECT_NE(odd->find("X=$((GPUS * 2))"), std::string::npos) << *odd;
  EXPECT_NE(odd->find("Y=8"), std::string::npos) << *odd;
  auto used = launchFacts("X=$((GPUS * 2))\ndeepspeed --num_gpus $X train.py\n");
  ASSERT_FALSE(used);
  EXPECT_NE(used.error().message.find("--num_gpus"), std::string::npos) << used.error().message;
  // A quoted value that runs on over lines is the lines joined (continuations dropped).
  auto multi = expandShellVariables("WANDB_ARGS=\"\\\n  --wandb-project x\n\"\nds_args=\" --deepspeed_config ds.json\"\n"
                                    "torchrun train.py $WANDB_ARGS $ds_args\n");
  ASSERT_TRUE(multi) << multi.error().toString();
  EXPECT_NE(multi->find("train.py    --wandb-project x   --deepspeed_config ds.json"), std::string::npos) << *multi;
  // A trailing comment is not part of a value.
  auto commented = expandShellVariables("TP=\"2\"  # tensor parallel\nX=$TP\n");
  ASSERT_TRUE(commented) << commented.error().toString();
  EXPECT_NE(commented->find("X=2\n"), std::string::npos) << *commented;
  // Arrays over lines, appended to, and expanded quoted or not (NVIDIA's Megatron-LM example scripts).
  auto arrays = expandShellVariables("DTYPE=fp8\nA=(\n    --fp8-format hybrid  # a comment\n    \"--vocab-size 128256\"\n)\n"
                                     "A+=(--bf16)\nB=( \"${A[@]}\" )\ntorchrun x.py ${B[@]}\n");
  ASSERT_TRUE(arrays) << arrays.error().toString();
  EXPECT_NE(arrays->find("torchrun x.py"), std::string::npos);
  const std::string launchLine = arrays->substr(arrays->find("torchrun x.py"));
  for (const char* word : {"--fp8-format hybrid", "\"--vocab-size 128256\"", "--bf16"}) {
    EXPECT_NE(launchLine.find(word), std::string::npos) << word << " in " << launchLine;
  }
  EXPECT_EQ(launchLine.find("comment"), std::string::npos) << launchLine;
}

TEST(Launch, BackslashesEscapeAsTheShellReadsThem) {
  // Inside double quotes \" is a quote; outside quotes \x is x; inside single quotes a backslash is itself.
  auto parsed = parseArgumentList("--a \"test -f \\\"$f\\\"\" --b 'x\\y' --c d\\ e\n");
  ASSERT_TRUE(parsed) << parsed.error().toString();
  ASSERT_EQ(parsed->flags.size(), 3u);
  EXPECT_EQ(parsed->flags[0].second.at(0), "test -f \"$f\"");
  EXPECT_EQ(parsed->flags[1].second.at(0), "x\\y");
  EXPECT_EQ(parsed->flags[2].second.at(0), "d e");
}

TEST(Launch, TheLauncherSaysHowManyGpusAndWhichConfig) {
  auto ds = launchFacts("N=4\ndeepspeed --num_nodes $N --num_gpus 8 pretrain_gpt.py --tensor-model-parallel-size 8 "
                        "--deepspeed --deepspeed_config=configs/ds.json\n");
  ASSERT_TRUE(ds) << ds.error().toString();
  EXPECT_EQ(ds->world(), 32);
  ASSERT_TRUE(ds->deepspeedConfig);
  EXPECT_EQ(*ds->deepspeedConfig, "configs/ds.json");
  auto tr = launchFacts("torchrun --nnodes=2 --nproc-per-node=4 pretrain_gpt.py --num-layers 2");
  ASSERT_TRUE(tr);
  EXPECT_EQ(tr->world(), 8);
  EXPECT_EQ(launchFacts("torchrun --nproc_per_node 8 train.py")->world(), 8);  // one node
  EXPECT_EQ(launchFacts("deepspeed --include \"worker-0:0,1,2,3@worker-1:0,1\" train.py")->world(), 6);
  EXPECT_EQ(launchFacts("python pretrain_gpt.py --num-layers 2")->world(), 0);  // says nothing
  auto hosts = launchFacts("deepspeed --hostfile hosts.txt train.py");
  ASSERT_TRUE(hosts);
  EXPECT_EQ(hosts->world(), 0);
  EXPECT_EQ(hosts->hostfile.value_or(""), "hosts.txt");
  // What cannot be counted is named.
  auto elastic = launchFacts("torchrun --nnodes 1:4 --nproc_per_node 8 train.py");
  ASSERT_FALSE(elastic);
  EXPECT_NE(elastic.error().message.find("--nnodes"), std::string::npos);
  EXPECT_NE(elastic.error().message.find("elastic"), std::string::npos);
  auto variable = launchFacts("deepspeed --num_gpus $GPUS train.py");
  ASSERT_FALSE(variable);
  EXPECT_NE(variable.error().message.find("does not define"), std::string::npos) << variable.error().message;
  EXPECT_FALSE(launchFacts("deepspeed --include worker-0 train.py"));
}

TEST(Launch, AHostfileCountsItsSlots) {
  auto slots = hostfileSlots("# two nodes\nworker-1 slots=8\n\nworker-2 slots=4\n");
  ASSERT_TRUE(slots) << slots.error().toString();
  EXPECT_EQ(*slots, 12);
  auto bad = hostfileSlots("worker-1 slots=8\nworker-2\n");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("line 2"), std::string::npos);
  EXPECT_FALSE(hostfileSlots("# nothing\n"));
}

TEST(Launch, TheBranchTheScriptTakesIsTheOneRead) {
  // NVIDIA's Megatron-LM examples choose their precision and data flags in if/else blocks
  // (examples/llama/train_llama3_8b_h100_fp8.sh): only the branch bash would take is read.
  const std::string script =
      "DTYPE=${DTYPE:-bf16}\nTOKENIZER=${3:-\"MOCK\"}\nTP=2\nA=()\n"
      "if [[ \"$DTYPE\" == \"fp8\" ]]; then\n  A+=(--fp8-format hybrid)\n  X=fp8\n"
      "elif [ \"$DTYPE\" = bf16 ] && [[ $TP -ge 2 ]]; then\n  A+=(--bf16)\n  X=bf16\n"
      "else\n  A+=(--fp16)\n  X=fp16\nfi\n"
      "if [[ \"$TOKENIZER\" == \"MOCK\" ]] || [[ -z \"$TOKENIZER\" ]]; then\n  A+=(--mock-data)\n"
      "  if [[ $TP -eq 1 ]]; then\n    A+=(--never)\n  fi\n"
      "else\n  A+=(--data-path $TOKENIZER)\nfi\n"
      "if [ ! -f \"pretrain_gpt.py\" ]; then\n  A+=(--file-test)\nfi\n"
      "if [[ $UNSET == 1 ]]; then\n  A+=(--unknown-then)\nelse\n  A+=(--unknown-else)\nfi\n"
      "torchrun x.py ${A[@]} --x $X\n";
  auto out = expandShellVariables(script);
  ASSERT_TRUE(out) << out.error().toString();
  const std::string line = out->substr(out->find("torchrun x.py"));
  for (const char* taken : {"--bf16", "--mock-data", "--x bf16"}) EXPECT_NE(line.find(taken), std::string::npos) << taken << " in " << line;
  for (const char* skipped : {"--fp8-format", "--fp16", "--never", "--data-path"}) {
    EXPECT_EQ(line.find(skipped), std::string::npos) << skipped << " in " << line;
  }
  // A test colo cannot evaluate (a file, an undefined name) reads every branch, as before.
  for (const char* unknown : {"--file-test", "--unknown-then", "--unknown-else"}) {
    EXPECT_NE(line.find(unknown), std::string::npos) << unknown << " in " << line;
  }
  auto fp8 = expandShellVariables("DTYPE=fp8\nif [[ \"$DTYPE\" == \"fp8\" ]]; then\n  F=\"--fp8-format hybrid\"\nelse\n  F=--bf16\nfi\nrun $F\n");
  ASSERT_TRUE(fp8) << fp8.error().toString();
  EXPECT_NE(fp8->find("run --fp8-format hybrid"), std::string::npos) << *fp8;
}

TEST(Launch, BranchesColoCannotFollowAreAllRead) {
  auto flags = [](const std::string& script) {
    auto out = expandShellVariables(script + "torchrun x.py ${A[@]}\n");
    EXPECT_TRUE(out) << out.error().toString();
    if (!out || out->find("torchrun x.py") == std::string::npos) return std::string("(no launch line)");
    return out->substr(out->find("torchrun x.py"));
  };
  // A here-document's body is text: its "if" does not open a block.
  std::string line = flags("A=()\nif [[ 0 == 1 ]]; then\n  python - <<EOF\nif True:\n    pass\nEOF\n  A+=(--never)\nfi\nA+=(--after)\n");
  EXPECT_NE(line.find("--after"), std::string::npos) << line;
  EXPECT_EQ(line.find("--never"), std::string::npos) << line;
  // One-line blocks however they end, and a comment that holds "fi".
  line = flags("A=()\nif [[ 0 == 1 ]]; then\n  if [[ a == a ]]; then x=1;fi 2>/dev/null\n"
               "  if [[ $Y == 0 ]]; then # wifi\n    A+=(--inner)\n  fi\n  A+=(--never)\nfi\nA+=(--after)\n");
  EXPECT_NE(line.find("--after"), std::string::npos) << line;
  EXPECT_EQ(line.find("--never"), std::string::npos) << line;
  EXPECT_EQ(line.find("--inner"), std::string::npos) << line;
  // A name set in a branch colo could not rule out, appended to, or unset is not certain: a test on it
  // reads every branch.
  line = flags("A=()\nif [ -f x ]; then\n  PREC=fp8\nelse\n  PREC=bf16\nfi\nif [[ $PREC == fp8 ]]; then\n  A+=(--fp8-format hybrid)\nfi\n"
               "P=bf16\nP+=x\nif [[ $P == bf16 ]]; then\n  A+=(--p-bf16)\nelse\n  A+=(--p-other)\nfi\n"
               "Q=bf16\nunset Q\nif [[ \"$Q\" == bf16 ]]; then\n  A+=(--q-bf16)\nfi\n"
               "R=x\nif [[ $R == x ]]; then\n  A+=(--r-known)\nfi\n");
  for (const char* read : {"--fp8-format hybrid", "--p-bf16", "--p-other", "--q-bf16", "--r-known"}) {
    EXPECT_NE(line.find(read), std::string::npos) << read << " in " << line;
  }
  // Blocks that do not balance (a stray fi): every branch is read, as before.
  line = flags("A=()\nif [[ a == b ]]; then\n  A+=(--skipped)\nfi\nfi\n");
  EXPECT_NE(line.find("--skipped"), std::string::npos) << line;
  line = flags("A=()\nif [[ a == b ]]; then\n  A+=(--unclosed)\n");
  EXPECT_NE(line.find("--unclosed"), std::string::npos) << line;
}

TEST(Launch, ShellTestsEvaluateAsBashDoes) {
  using detail::shellCondition;
  EXPECT_EQ(shellCondition("[[ \"a\" == \"a\" ]]"), true);
  EXPECT_EQ(shellCondition("[ a != a ]"), false);
  EXPECT_EQ(shellCondition("[[ -z \"\" ]]"), true);
  EXPECT_EQ(shellCondition("[[ -n \"\" ]]"), false);
  EXPECT_EQ(shellCondition("[[ 8 -gt 4 && 2 -le 1 ]]"), false);
  EXPECT_EQ(shellCondition("[[ 2 -le 1 || 8 -gt 4 && 1 -eq 1 ]]"), true);  // && binds tighter inside [[ ]]
  EXPECT_EQ(shellCondition("! [[ x == y ]]"), true);
  EXPECT_EQ(shellCondition("[[ ! x == y ]]"), true);
  EXPECT_EQ(shellCondition("[[ a == b ]] || [[ $UNSET == 1 ]]"), std::nullopt);
  EXPECT_EQ(shellCondition("[[ a == a ]] || [[ $UNSET == 1 ]]"), true);   // bash stops at the first true
  EXPECT_EQ(shellCondition("[[ a == b ]] && [[ $UNSET == 1 ]]"), false);
  EXPECT_EQ(shellCondition("[[ fp8 == fp* ]]"), std::nullopt);  // a pattern
  EXPECT_EQ(shellCondition("[[ fp8 == \"fp*\" ]]"), false);     // quoted: a string
  EXPECT_EQ(shellCondition("[ -d /data ]"), std::nullopt);
  EXPECT_EQ(shellCondition("grep -q x file"), std::nullopt);
  EXPECT_EQ(shellCondition("[[ a == ]]"), std::nullopt);
  EXPECT_EQ(shellCondition("[[ 1 -eq x ]]"), std::nullopt);
  std::string many = "[[ ";  // a long line of negations is counted, not recursed into
  for (int i = 0; i < 200001; ++i) many += "! ";
  EXPECT_EQ(shellCondition(many + "a == a ]]"), false);
}

}  // namespace
}  // namespace colo::planner
