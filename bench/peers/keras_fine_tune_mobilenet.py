"""Keras 3's side of examples/fine_tune_mobilenet.cc: the same fine-tuning
recipe, on the same image folder, from the same pretrained base (the .keras
file the example wrote: Keras's MobileNetV2(weights=path) loads it), under
MirroredStrategy over 2 logical CPUs (the example's 2 replicas), with the
same batch, schedule, steps and validation steps — base frozen, then
unfrozen. It shows whether Lockstep's frozen and unfrozen variants behave
as Keras's do (docs/models.md, issue #19).

    build/keras-venv/bin/python bench/peers/keras_fine_tune_mobilenet.py DIR [EPOCHS STEPS VAL_STEPS]

DIR is the example's --dir after a run (its image folder fashion_96_N/ and
mobilenet_v2_0.35_96_fashion10.keras in it; bench/fine_tune_three_ways.sh
runs all three).
"""
import glob
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras  # noqa: E402


def main():
    directory = sys.argv[1]
    epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    steps_per_epoch = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    validation_steps = int(sys.argv[4]) if len(sys.argv) > 4 else 12
    folders = glob.glob(os.path.join(directory, "fashion_96_*"))
    if len(folders) != 1:
        sys.exit(f"{directory}: expected one image folder fashion_96_N, found {folders}")
    folder = folders[0]
    base_path = os.path.join(directory, "mobilenet_v2_0.35_96_fashion10.keras")
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    print("Number of replicas:", strategy.num_replicas_in_sync)
    batch_size = 32 * strategy.num_replicas_in_sync

    def dataset(subset):
        return keras.utils.image_dataset_from_directory(
            folder, label_mode="binary", batch_size=None, image_size=(96, 96), seed=123,
            validation_split=0.2, subset=subset)

    def preprocess(x, y):
        return keras.applications.mobilenet_v2.preprocess_input(x), y

    training_dataset = (dataset("training").shuffle(1024).repeat().batch(batch_size)
                        .map(preprocess).prefetch(tf.data.AUTOTUNE))
    validation_dataset = (dataset("validation").repeat().batch(batch_size).map(preprocess)
                          .prefetch(tf.data.AUTOTUNE))

    start_lr, min_lr, max_lr = 0.00001, 0.00001, 0.00005 * strategy.num_replicas_in_sync
    rampup_epochs, sustain_epochs, exp_decay = 5, 0, 0.8

    def lrfn(epoch):
        if epoch < rampup_epochs:
            return (max_lr - start_lr) / rampup_epochs * epoch + start_lr
        if epoch < rampup_epochs + sustain_epochs:
            return max_lr
        return (max_lr - min_lr) * exp_decay ** (epoch - rampup_epochs - sustain_epochs) + min_lr

    results = []
    for trainable in (False, True):
        print("\n=== Fine-tuning with the base", "unfrozen" if trainable else "frozen", "===")
        with strategy.scope():
            pretrained_model = keras.applications.MobileNetV2(
                input_shape=(96, 96, 3), alpha=0.35, include_top=False, weights=base_path)
            pretrained_model.trainable = trainable
            model = keras.Sequential([
                keras.Input((96, 96, 3)), pretrained_model,
                keras.layers.GlobalAveragePooling2D(),
                keras.layers.Dense(512, activation="relu"),
                keras.layers.Dropout(0.5),
                keras.layers.Dense(1)])
            model.compile(optimizer="adam",
                          loss=keras.losses.BinaryCrossentropy(from_logits=True),
                          metrics=[keras.metrics.BinaryAccuracy(threshold=0.0, name="accuracy")])
        lr_callback = keras.callbacks.LearningRateScheduler(lrfn, verbose=1)
        history = model.fit(training_dataset, epochs=epochs, verbose=2, callbacks=[lr_callback],
                            validation_data=validation_dataset, steps_per_epoch=steps_per_epoch,
                            validation_steps=validation_steps)
        results.append(("unfrozen" if trainable else "frozen",
                        history.history["val_accuracy"][-1]))
    print()
    for variant, accuracy in results:
        print(f"{variant} base: val_accuracy {accuracy:.4f}")


if __name__ == "__main__":
    main()
