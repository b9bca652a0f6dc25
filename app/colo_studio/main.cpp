// colo-studio: the desktop workbench. `--screenshot out.png --model M --cluster C` renders the window
// with the best plan selected (offscreen works) and exits, for docs and tests.
#include <QApplication>
#include <QEventLoop>
#include <QCommandLineParser>
#include <QTimer>

#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>

#include "colo/core/version.h"
#include "colo/ui/main_window.h"
#include "colo/ui/operator_view.h"
#include "colo/ui/search_runner.h"

namespace {

bool isSet(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0';
}

// Without a display Qt aborts in QApplication's constructor ("could not connect to display"), before
// any option is read. What needs no window (--help, --version, --screenshot) runs on the offscreen
// platform instead; the interactive window gets one clear error and exit 2.
bool needsNoWindow(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-h" || a == "--help" || a == "--help-all" || a == "-v" || a == "--version" || a == "--screenshot" ||
        a.starts_with("--screenshot=")) {
      return true;
    }
  }
  return false;
}

int usageError(const std::string& message) {
  std::cerr << "colo-studio: error: " << message << "\n";
  return 2;
}

// A whole integer in [low, high] ("12abc", "x" and "" are not).
bool intInRange(const QString& text, int low, int high) {
  bool ok = false;
  const int v = text.toInt(&ok);
  return ok && v >= low && v <= high && !text.startsWith('+');
}

bool positiveInt(const QString& text) { return intInRange(text, 1, 1 << 24); }  // the batch box's range

}  // namespace

int main(int argc, char** argv) {
  if (!isSet("QT_QPA_PLATFORM") && !isSet("DISPLAY") && !isSet("WAYLAND_DISPLAY")) {
    if (!needsNoWindow(argc, argv)) {
      std::cerr << "colo-studio: error: no display (neither DISPLAY nor WAYLAND_DISPLAY is set): run it in a desktop "
                   "session or under xvfb-run, or render a window to a file with --screenshot FILE\n";
      return 2;
    }
    setenv("QT_QPA_PLATFORM", "offscreen", 1);  // (set but empty counts as unset: Qt would still abort)
  }
  QApplication app(argc, argv);
  QApplication::setApplicationName("colo-studio");
  QApplication::setApplicationVersion(colo::kVersion);
  QCommandLineParser parser;
  parser.setApplicationDescription("colo-studio: explore, understand, save and run hybrid-parallel training plans");
  parser.addHelpOption();
  parser.addVersionOption();
  QCommandLineOption model("model", "model: library name or file", "M");
  QCommandLineOption cluster("cluster", "cluster: library name or file", "C");
  QCommandLineOption gbs("gbs", "global batch size (samples)", "G");
  QCommandLineOption screenshot("screenshot", "search, select the best plan, save the window as PNG and exit", "FILE");
  QCommandLineOption tab("tab", "detail tab shown in the screenshot: 0 timeline, 1 memory, 2 mesh, 3 baseline, 4 run, 5 operators", "N");
  QCommandLineOption tokens("train-tokens", "tokens to train on (e.g. 1.5T): days, GPU-hours and cost per plan", "T");
  QCommandLineOption price("price-per-gpu-hour", "dollars per GPU-hour, for the cost column", "USD");
  QCommandLineOption deadline("deadline-days", "days the training run must finish in: later plans read LATE", "D");
  QCommandLineOption solveOperators("solve-operators", "with --screenshot: also run the per-operator solve (Operators tab) before saving");
  parser.addOptions({model, cluster, gbs, screenshot, tab, tokens, price, deadline, solveOperators});
  // Bad options are bad input (exit 2, one line); process() would exit 1. It still handles --help,
  // --help-all and --version once the arguments parse.
  if (!parser.parse(QCoreApplication::arguments())) return usageError(parser.errorText().toStdString());
  parser.process(app);
  if (parser.isSet(gbs) && !positiveInt(parser.value(gbs))) {
    return usageError("--gbs: expected 1 to 16777216 samples, got \"" + parser.value(gbs).toStdString() + "\"");
  }
  if (parser.isSet(tab) && !intInRange(parser.value(tab), 0, 5)) {
    return usageError("--tab: expected 0 to 5, got \"" + parser.value(tab).toStdString() + "\"");
  }

  colo::ui::MainWindow window;
  window.resize(1500, 950);
  if (parser.isSet(gbs)) window.setGlobalBatch(parser.value(gbs).toInt());
  if (parser.isSet(tokens)) {
    window.setTrainingBudget(parser.value(tokens), parser.value(price).toDouble(), parser.value(deadline).toDouble());
  }
  // The first file that does not open is the one named (opening the next would clear its message).
  std::string firstError;
  if (parser.isSet(model) && !window.openModel(parser.value(model))) firstError = window.errorText().toStdString();
  if (parser.isSet(cluster) && !window.openCluster(parser.value(cluster)) && firstError.empty()) {
    firstError = window.errorText().toStdString();
  }
  const bool ok = firstError.empty();
  if (parser.isSet(screenshot)) {
    if (!ok || !parser.isSet(model) || !parser.isSet(cluster)) {
      return usageError(ok ? std::string("--screenshot needs --model and --cluster") : firstError);
    }
    window.show();
    window.startSearch();
    window.runner()->waitForFinished();
    if (parser.isSet(tab)) window.showDetailTab(parser.value(tab).toInt());
    if (parser.isSet(solveOperators)) {
      QEventLoop wait;
      QObject::connect(window.operators(), &colo::ui::OperatorView::jointSolved, &wait, &QEventLoop::quit);
      window.operators()->solveJoint();
      if (window.operators()->solving()) wait.exec();
    }
    QApplication::processEvents();
    const QString file = parser.value(screenshot);
    if (!window.grab().save(file)) {
      std::cerr << "colo-studio: error: cannot write " << file.toStdString() << "\n";
      return 2;
    }
    std::cout << file.toStdString() << "\n";
    return 0;
  }
  window.show();
  if (ok && parser.isSet(model) && parser.isSet(cluster)) QTimer::singleShot(0, &window, &colo::ui::MainWindow::startSearch);
  return QApplication::exec();
}
