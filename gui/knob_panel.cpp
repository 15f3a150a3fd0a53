#include "gui/knob_panel.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>
#include <QVBoxLayout>

#include "plan/hardware.hpp"

namespace parallax::gui {
namespace {

QSpinBox* spin(int lo, int hi) {
  auto* s = new QSpinBox;
  s->setRange(lo, hi);
  s->setKeyboardTracking(false);  // re-simulate when the number is complete, not per digit
  return s;
}

QDoubleSpinBox* mb_spin() {
  auto* s = new QDoubleSpinBox;
  s->setRange(0.01, 100000);
  s->setDecimals(2);
  s->setSuffix(" MiB");
  s->setKeyboardTracking(false);
  return s;
}

}  // namespace

KnobPanel::KnobPanel(QWidget* parent) : QWidget(parent) {
  auto* form = new QFormLayout(this);
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  data_ = spin(1, 4096);
  pipeline_ = spin(1, 512);
  virtual_ = spin(1, 64);
  partition_len_ = new QComboBox;
  partition_len_->setEditable(true);
  partition_len_->addItem("balanced");
  chunks_ = spin(1, 65536);
  batch_size_ = spin(1, 1 << 24);
  schedule_ = new QComboBox;
  schedule_->addItems({"gpipe", "1f1b", "interleaved-1f1b"});
  bucket_cap_ = mb_spin();
  first_bucket_ = mb_spin();
  grad_accumulation_ = spin(1, 4096);
  precision_ = new QComboBox;
  precision_->addItems({"fp32", "bf16", "fp16"});
  checkpointing_ = new QCheckBox("recompute in backward");
  hardware_ = new QComboBox;

  add_row(form, "parallel.data", "data", data_, "Replicas (DDP).");
  add_row(form, "parallel.pipeline", "pipeline", pipeline_, "Pipeline ranks per replica.");
  add_row(form, "parallel.virtual", "virtual", virtual_, "Stages per pipeline rank (interleaved-1f1b).");
  add_row(form, "parallel.partition_len", "partition_len", partition_len_,
          "Layers per stage: balanced, one number for every stage, or a list such as [4, 6].");
  add_row(form, "parallel.chunks", "chunks", chunks_, "Micro-batches per mini-batch; must divide data.batch_size.");
  add_row(form, "data.batch_size", "batch_size", batch_size_,
          "Samples per replica per mini-batch; the global batch is batch_size x grad_accumulation x data.");
  add_row(form, "parallel.schedule", "schedule", schedule_, "Pipeline schedule.");
  add_row(form, "parallel.bucket_cap_mb", "bucket_cap_mb", bucket_cap_, "DDP bucket size (as PyTorch's DDP).");
  add_row(form, "parallel.first_bucket_mb", "first_bucket_mb", first_bucket_, "Size of DDP's first bucket.");
  add_row(form, "parallel.grad_accumulation", "grad_accumulation", grad_accumulation_,
          "Mini-batches per optimizer step; gradients sync once per step.");
  add_row(form, "parallel.precision", "precision", precision_, "Compute precision (autocast).");
  add_row(form, "parallel.activation_checkpointing", "activation ckpt", checkpointing_,
          "Recompute activations in backward: less memory, more compute.");
  add_row(form, "hardware", "hardware", hardware_, "Hardware profile the prediction uses.");
  general_error_ = new QLabel;
  general_error_->setWordWrap(true);
  general_error_->setStyleSheet("color: #c62828;");
  general_error_->hide();
  form->addRow(general_error_);

  for (QSpinBox* s : {data_, pipeline_, virtual_, chunks_, batch_size_, grad_accumulation_})
    connect(s, &QSpinBox::valueChanged, this, &KnobPanel::changed);
  for (QDoubleSpinBox* s : {bucket_cap_, first_bucket_}) connect(s, &QDoubleSpinBox::valueChanged, this, &KnobPanel::changed);
  for (QComboBox* c : {schedule_, precision_, hardware_}) connect(c, &QComboBox::currentIndexChanged, this, &KnobPanel::changed);
  connect(partition_len_->lineEdit(), &QLineEdit::editingFinished, this, &KnobPanel::changed);
  connect(partition_len_, &QComboBox::activated, this, &KnobPanel::changed);
  connect(checkpointing_, &QCheckBox::toggled, this, &KnobPanel::changed);
}

QLabel* KnobPanel::add_row(QFormLayout* form, const std::string& key, const QString& label, QWidget* editor,
                           const QString& tip) {
  editor->setToolTip(QString::fromStdString(key) + ": " + tip);
  form->addRow(label, editor);
  auto* error = new QLabel;
  error->setWordWrap(true);
  error->setStyleSheet("color: #c62828;");
  error->hide();
  form->addRow(error);
  errors_[key] = error;
  return error;
}

void KnobPanel::set_knobs(const Knobs& k, const std::string& scenario_hardware) {
  loading_ = true;
  data_->setValue(k.data);
  pipeline_->setValue(k.pipeline);
  virtual_->setValue(k.virtual_stages);
  partition_len_->setCurrentText(QString::fromStdString(k.partition_len));
  chunks_->setValue(k.chunks);
  batch_size_->setValue(k.batch_size);
  if (schedule_->findText(QString::fromStdString(k.schedule)) < 0) schedule_->addItem(QString::fromStdString(k.schedule));
  schedule_->setCurrentText(QString::fromStdString(k.schedule));
  bucket_cap_->setValue(k.bucket_cap_mb);
  first_bucket_->setValue(k.first_bucket_mb);
  grad_accumulation_->setValue(k.grad_accumulation);
  precision_->setCurrentText(QString::fromStdString(k.precision));
  checkpointing_->setChecked(k.activation_checkpointing);
  if (!scenario_hardware.empty()) {
    hardware_->clear();
    hardware_->addItem(QString::fromStdString("as in the scenario (" + scenario_hardware + ")"), QString());
    for (const auto& n : plan::builtin_hardware_names()) hardware_->addItem(QString::fromStdString(n), QString::fromStdString(n));
  }
  const int at = hardware_->findData(QString::fromStdString(k.hardware));
  hardware_->setCurrentIndex(at < 0 ? 0 : at);
  loading_ = false;
}

Knobs KnobPanel::knobs() const {
  Knobs k;
  k.data = data_->value();
  k.pipeline = pipeline_->value();
  k.virtual_stages = virtual_->value();
  k.partition_len = partition_len_->currentText().trimmed().toStdString();
  k.chunks = chunks_->value();
  k.batch_size = batch_size_->value();
  k.schedule = schedule_->currentText().toStdString();
  k.bucket_cap_mb = bucket_cap_->value();
  k.first_bucket_mb = first_bucket_->value();
  k.grad_accumulation = grad_accumulation_->value();
  k.precision = precision_->currentText().toStdString();
  k.activation_checkpointing = checkpointing_->isChecked();
  k.hardware = hardware_->currentData().toString().toStdString();
  return k;
}

void KnobPanel::changed() {
  if (!loading_) emit knobs_changed(knobs());
}

void KnobPanel::show_error(const std::string& key, const QString& message) {
  clear_errors();
  auto it = errors_.find(key);
  QLabel* label = it == errors_.end() ? general_error_ : it->second;
  label->setText(message);
  label->show();
}

void KnobPanel::clear_errors() {
  for (auto& [key, label] : errors_) label->hide(), label->clear();
  general_error_->hide();
  general_error_->clear();
}

QString KnobPanel::error_of(const std::string& key) const {
  auto it = errors_.find(key);
  return it == errors_.end() ? general_error_->text() : it->second->text();
}

}  // namespace parallax::gui
