"""TensorFlow's side of bench/images.sh: keras.utils.image_dataset_from_directory
over the same folder of JPEGs as Lockstep's BM_Images_FromDirectory (image
size = the files' own, batch 32, shuffled with a seed), with the input
pipeline limited to THREADS threads (tf.data's private thread pool, one
intra-op thread), one epoch per measurement after a warm-up epoch.
Prints `RESULT {json}` lines with images_per_s and cpu_ms_per_image (all
threads' CPU time per image).

usage: tf_image_folder.py DIR SIZE THREADS [EPOCHS]
"""
import json
import os
import resource
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import tensorflow as tf
import keras


def main():
    directory, size, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    epochs = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    ds = keras.utils.image_dataset_from_directory(
        directory, image_size=(size, size), batch_size=32, seed=1, verbose=False)
    files = len(ds.file_paths)
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    options.threading.max_intra_op_parallelism = 1
    ds = ds.with_options(options)
    for _ in ds:  # warm-up: tracing, the page cache
        pass
    def cpu_seconds():  # every thread of this process
        u = resource.getrusage(resource.RUSAGE_SELF)
        return u.ru_utime + u.ru_stime

    for _ in range(epochs):
        t0, c0 = time.perf_counter(), cpu_seconds()
        images = 0
        for x, _ in ds:
            images += int(x.shape[0])
        seconds, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        print("RESULT " + json.dumps({"system": "tensorflow", "size": size, "threads": threads,
                                      "files": files, "images_per_s": images / seconds,
                                      "cpu_ms_per_image": cpu * 1e3 / images}))


if __name__ == "__main__":
    main()
